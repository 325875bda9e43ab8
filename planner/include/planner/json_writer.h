// The project's one JSON writer (no dependency): `--json` output, run records, plan exports.
// Keys and values are written in call order; the caller keeps the structure right. Numbers are
// written as the shortest text that reads back as the same double; non-finite numbers (an unknown
// price) are written as null.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace capplan {

// A finite double as the shortest text that reads back as the same value, independent of the
// locale: whole numbers below 1e15 in plain digits ("300000000000"), others by std::to_chars
// ("0.1", "1.5e-07"). Shared by the JSON writer and the YAML plan writer.
inline std::string shortest_number(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v));
    return std::string(buf, r.ptr);
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// `s` as a JSON string, with the surrounding quotes; control characters escaped.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = true) : pretty_(pretty) {}

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& key(std::string_view k) {
    separate();
    quote(k);
    out_ += pretty_ ? ": " : ":";
    after_key_ = true;
    return *this;
  }

  JsonWriter& value(std::string_view s) {
    separate();
    quote(s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) {
    separate();
    out_ += b ? "true" : "false";
    return *this;
  }
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v) {
    separate();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& value(double v) {
    separate();
    out_ += number(v);
    return *this;
  }
  JsonWriter& null() {
    separate();
    out_ += "null";
    return *this;
  }

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

  const std::string& str() const { return out_; }

  // Shortest text that reads back as the same double; null when not finite.
  static std::string number(double v) { return std::isfinite(v) ? shortest_number(v) : "null"; }

 private:
  JsonWriter& maybe_key(std::string_view k) { return k.empty() ? *this : key(k); }
  JsonWriter& open(char c) {
    separate();
    out_ += c;
    counts_.push_back(0);
    return *this;
  }
  JsonWriter& close(char c) {
    const bool empty = counts_.empty() || counts_.back() == 0;
    if (!counts_.empty()) counts_.pop_back();
    if (pretty_ && !empty) newline();
    out_ += c;
    return *this;
  }
  // Comma and indentation before a new element (not before the value that follows a key).
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (counts_.empty()) return;
    if (counts_.back()++ > 0) out_ += ',';
    if (pretty_) newline();
  }
  void newline() {
    out_ += '\n';
    out_.append(counts_.size() * 2, ' ');
  }
  void quote(std::string_view s) { out_ += json_quote(s); }

  bool pretty_;
  bool after_key_ = false;
  std::vector<int> counts_;
  std::string out_;
};

}  // namespace capplan
