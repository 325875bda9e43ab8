// A small JSON reader for the runtime's own files (checkpoint manifests, metrics lines). It parses
// RFC 8259 JSON into a tree; it is not a general-purpose library (no streaming, no \u surrogate
// pairs beyond the basic plane, numbers as double).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace capplan::rt::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Value> arr;
  std::map<std::string, Value> obj;

  bool is_object() const { return kind == Kind::Object; }
  const Value* get(const std::string& key) const;  // nullptr when absent or not an object
  // This value as a number: a number, or one of the strings "NaN" / "Infinity" / "-Infinity"
  // the metrics writer uses for non-finite values; `fallback` otherwise.
  double as_number(double fallback) const;
  // A number, or the strings "NaN" / "Infinity" / "-Infinity" the metrics writer uses for
  // non-finite values; `fallback` otherwise.
  double number_or(const std::string& key, double fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  // An integral number in [lo, hi]; `fallback` for anything else (absent, fractional, NaN, out of
  // range), so a corrupt file never reaches an undefined float-to-integer conversion.
  int64_t int_or(const std::string& key, int64_t fallback, int64_t lo = INT64_MIN / 2,
                 int64_t hi = INT64_MAX / 2) const;
};

// Parses `text`; on failure returns false and sets `error` ("column 12: expected ':'").
bool parse(const std::string& text, Value* out, std::string* error);

}  // namespace capplan::rt::json
