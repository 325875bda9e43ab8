// The project's one JSON library, nlohmann-json (Debian: nlohmann-json3-dev), for reading and
// writing, with the project's number convention in one place: numbers that are not finite (an
// unknown price, a NaN loss) are written as null and read back as NaN; whole numbers below 1e15
// are written as integers. Text is always UTF-8 with '.' as the decimal point, whatever the
// process's locale (nlohmann formats and parses numbers itself).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "planner/json_fwd.h"

namespace capplan {

// `v` as the project writes a number: null when not finite; an integer when whole and below 1e15
// in magnitude ("300000000000", not "300000000000.0"); otherwise the double, written as the
// shortest text that reads back as the same value.
Json json_number(double v);

// A value as a double: a number as it is; null and the strings "NaN", "Infinity", "-Infinity"
// (what older metrics files hold) as not finite; `fallback` for anything else.
double json_double(const Json& v, double fallback);
// Member `key` of an object as json_double; `fallback` when absent or `obj` is not an object.
double json_double(const Json& obj, const std::string& key, double fallback);
// Member `key` as a string; `fallback` when absent or not a string.
std::string json_string(const Json& obj, const std::string& key, const std::string& fallback = {});
// Member `key` as an integral number in [lo, hi]; `fallback` for anything else (absent,
// fractional, not finite, out of range), so a corrupt file never reaches an undefined
// float-to-integer conversion.
int64_t json_int(const Json& obj, const std::string& key, int64_t fallback, int64_t lo = INT64_MIN / 2,
                 int64_t hi = INT64_MAX / 2);

// The text of `j`: indented by two spaces, or on one line. Bytes that are not UTF-8 in strings
// are replaced by U+FFFD, so writing never throws.
std::string json_dump(const Json& j, bool pretty = true);
// Parses `text`; nullopt with *error set ("at byte 12: ...") when it is not one JSON value.
std::optional<Json> json_parse(const std::string& text, std::string* error = nullptr);

}  // namespace capplan
