// The project's JSON number convention and the never-throwing dump and parse over nlohmann-json
// (see planner/json.h).
#include "planner/json.h"

#include "planner/json_writer.h"

#include <cmath>
#include <limits>

namespace capplan {

Json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

double json_double(const Json& v, double fallback) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return kInf;
    if (s == "-Infinity") return -kInf;
  }
  return fallback;
}

double json_double(const Json& obj, const std::string& key, double fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it == obj.end() ? fallback : json_double(*it, fallback);
}

std::string json_string(const Json& obj, const std::string& key, const std::string& fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int64_t json_int(const Json& obj, const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return fallback;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned()) {
      const uint64_t u = it->get<uint64_t>();
      return u <= uint64_t(INT64_MAX) && int64_t(u) >= lo && int64_t(u) <= hi ? int64_t(u) : fallback;
    }
    const int64_t i = it->get<int64_t>();
    return i >= lo && i <= hi ? i : fallback;
  }
  const double d = it->get<double>();
  if (!std::isfinite(d) || d != std::floor(d) || d < double(lo) || d > double(hi)) return fallback;
  return int64_t(d);
}

std::string json_dump(const Json& j, bool pretty) {
  return j.dump(pretty ? 2 : -1, ' ', false, Json::error_handler_t::replace);
}

std::optional<Json> json_parse(const std::string& text, std::string* error) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (error) {
      try {
        const Json again = Json::parse(text);  // throws, with the position and the reason
        (void)again;
      } catch (const Json::parse_error& e) {
        // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> "at line 1, ..."
        const std::string what = e.what();
        const size_t at = what.find("parse error ");
        *error = at == std::string::npos ? what : what.substr(at + 12);
      } catch (const Json::exception& e) {
        // A number out of range ("[json.exception.out_of_range.406] number overflow parsing
        // '1E400'") -> "number overflow parsing '1E400'".
        const std::string what = e.what();
        const size_t at = what.find("] ");
        *error = at == std::string::npos ? what : what.substr(at + 2);
      }
    }
    return std::nullopt;
  }
  return j;
}

std::string json_quote(std::string_view s) { return json_dump(Json(std::string(s)), false); }

JsonWriter::JsonWriter(bool pretty) : pretty_(pretty), root_(std::make_unique<Json>()) {}
JsonWriter::~JsonWriter() = default;

Json& JsonWriter::place(Json&& v) {
  if (open_.empty()) {
    *root_ = std::move(v);
    return *root_;
  }
  Json& parent = *open_.back();
  if (parent.is_object()) {
    Json& slot = parent[key_];
    slot = std::move(v);
    return slot;
  }
  parent.push_back(std::move(v));
  return parent.back();
}

JsonWriter& JsonWriter::open(Json&& v) {
  open_.push_back(&place(std::move(v)));
  return *this;
}

JsonWriter& JsonWriter::begin_object() { return open(Json::object()); }
JsonWriter& JsonWriter::begin_array() { return open(Json::array()); }
JsonWriter& JsonWriter::end_object() {
  if (!open_.empty()) open_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::end_array() { return end_object(); }
JsonWriter& JsonWriter::key(std::string_view k) {
  key_ = std::string(k);
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view s) {
  place(Json(std::string(s)));
  return *this;
}
JsonWriter& JsonWriter::value(bool b) {
  place(Json(b));
  return *this;
}
JsonWriter& JsonWriter::value(int64_t v) {
  place(Json(v));
  return *this;
}
JsonWriter& JsonWriter::value(double v) {
  place(json_number(v));
  return *this;
}
JsonWriter& JsonWriter::null() {
  place(Json(nullptr));
  return *this;
}
std::string JsonWriter::str() const { return json_dump(*root_, pretty_); }
std::string JsonWriter::number(double v) { return json_dump(json_number(v), false); }

}  // namespace capplan
