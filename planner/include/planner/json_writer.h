// JsonWriter: builds a JSON document member by member, in call order, over the project's JSON
// library (planner/json.h): `--json` output, run records. Numbers follow json_number (null when
// not finite); the text is json_dump's. The caller keeps the structure right (a key before each
// member of an object, every begin matched by an end). This header does not pull in the library.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "planner/json_fwd.h"

namespace capplan {

// A finite double as the shortest text that reads back as the same value, independent of the
// locale: whole numbers below 1e15 in plain digits ("300000000000"), others by std::to_chars
// ("0.1", "1.5e-07"). The number text of the YAML writers and of messages; JSON gets the same
// through json_number.
inline std::string shortest_number(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v));
    return std::string(buf, r.ptr);
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// `s` as a JSON string, with the surrounding quotes (also a valid YAML double-quoted scalar).
std::string json_quote(std::string_view s);

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = true);
  ~JsonWriter();
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(double v);
  JsonWriter& null();

  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  // Keyed forms, for objects written member by member; an empty key writes a bare value (an
  // array element).
  JsonWriter& begin_object(std::string_view k) { return maybe_key(k).begin_object(); }
  JsonWriter& begin_array(std::string_view k) { return maybe_key(k).begin_array(); }
  JsonWriter& num(std::string_view k, double v) { return maybe_key(k).value(v); }
  JsonWriter& integer(std::string_view k, int64_t v) { return maybe_key(k).value(v); }
  JsonWriter& str(std::string_view k, std::string_view v) { return maybe_key(k).value(v); }
  JsonWriter& boolean(std::string_view k, bool v) { return maybe_key(k).value(v); }
  JsonWriter& null(std::string_view k) { return maybe_key(k).null(); }

  std::string str() const;
  const Json& json() const { return *root_; }

  // A number as JSON writes it (json_number's text): "null" when not finite.
  static std::string number(double v);

 private:
  JsonWriter& maybe_key(std::string_view k) { return k.empty() ? *this : key(k); }
  // Adds `v` where the writer stands (under the pending key in an object, at the end of an
  // array, or as the document) and returns where it landed.
  Json& place(Json&& v);
  JsonWriter& open(Json&& v);

  bool pretty_;
  std::unique_ptr<Json> root_;
  std::vector<Json*> open_;  // the objects and arrays being filled, innermost last
  std::string key_;
};

}  // namespace capplan
