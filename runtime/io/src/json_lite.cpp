// Recursive-descent JSON parser (RFC 8259) for the runtime's own files.
#include "json_lite.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace capplan::rt::json {

const Value* Value::get(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &it->second;
}

double Value::as_number(double fallback) const {
  if (kind == Kind::Number) return num;
  if (kind == Kind::String) {
    if (str == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (str == "Infinity") return std::numeric_limits<double>::infinity();
    if (str == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  return fallback;
}

double Value::number_or(const std::string& key, double fallback) const {
  const Value* v = get(key);
  return v ? v->as_number(fallback) : fallback;
}

int64_t Value::int_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  const Value* v = get(key);
  if (!v || v->kind != Kind::Number) return fallback;
  const double d = v->num;
  if (!(d >= double(lo) && d <= double(hi)) || d != std::floor(d)) return fallback;
  return int64_t(d);
}

std::string Value::string_or(const std::string& key, const std::string& fallback) const {
  const Value* v = get(key);
  return (v && v->kind == Kind::String) ? v->str : fallback;
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}

  bool run(Value* out, std::string* error) {
    ws();
    if (!value(out, 0)) {
      *error = "column " + std::to_string(pos_ + 1) + ": " + err_;
      return false;
    }
    ws();
    if (pos_ != t_.size()) {
      *error = "column " + std::to_string(pos_ + 1) + ": unexpected text after the JSON value";
      return false;
    }
    return true;
  }

 private:
  bool fail(const std::string& m) {
    if (err_.empty()) err_ = m;
    return false;
  }
  void ws() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' ||
                                t_[pos_] == '\r'))
      ++pos_;
  }
  bool lit(const char* s) {
    size_t n = std::char_traits<char>::length(s);
    if (t_.compare(pos_, n, s) != 0) return false;
    pos_ += n;
    return true;
  }

  bool value(Value* v, int depth) {
    if (depth > 64) return fail("nesting deeper than 64");
    if (pos_ >= t_.size()) return fail("unexpected end of input");
    char c = t_[pos_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v->kind = Value::Kind::String;
      return string(&v->str);
    }
    if (lit("true")) { v->kind = Value::Kind::Bool; v->b = true; return true; }
    if (lit("false")) { v->kind = Value::Kind::Bool; v->b = false; return true; }
    if (lit("null")) { v->kind = Value::Kind::Null; return true; }
    if (c == '-' || (c >= '0' && c <= '9')) return number(v);
    return fail(std::string("unexpected character '") + c + "'");
  }

  bool number(Value* v) {
    size_t start = pos_;
    if (t_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t s = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      return pos_ > s;
    };
    if (!digits()) return fail("expected a digit");
    if (pos_ < t_.size() && t_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail("expected a digit after '.'");
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("expected a digit in the exponent");
    }
    v->kind = Value::Kind::Number;
    // std::from_chars: exact and independent of the C locale (strtod is not).
    std::from_chars(t_.data() + start, t_.data() + pos_, v->num);
    return true;
  }

  static void utf8(uint32_t cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(char(cp));
    } else if (cp < 0x800) {
      s->push_back(char(0xC0 | (cp >> 6)));
      s->push_back(char(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(char(0xE0 | (cp >> 12)));
      s->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(char(0x80 | (cp & 0x3F)));
    }
  }

  bool string(std::string* s) {
    ++pos_;  // opening quote
    while (pos_ < t_.size()) {
      char c = t_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        s->push_back(c);
        continue;
      }
      if (pos_ >= t_.size()) break;
      char e = t_[pos_++];
      switch (e) {
        case '"': s->push_back('"'); break;
        case '\\': s->push_back('\\'); break;
        case '/': s->push_back('/'); break;
        case 'b': s->push_back('\b'); break;
        case 'f': s->push_back('\f'); break;
        case 'n': s->push_back('\n'); break;
        case 'r': s->push_back('\r'); break;
        case 't': s->push_back('\t'); break;
        case 'u': {
          if (pos_ + 4 > t_.size()) return fail("short \\u escape");
          uint32_t cp = 0;
          for (int i = 0; i < 4; ++i) {
            char h = t_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= uint32_t(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= uint32_t(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= uint32_t(h - 'A' + 10);
            else return fail("bad hex digit in \\u escape");
          }
          utf8(cp, s);
          break;
        }
        default: return fail(std::string("bad escape '\\") + e + "'");
      }
    }
    return fail("unterminated string");
  }

  bool array(Value* v, int depth) {
    ++pos_;
    v->kind = Value::Kind::Array;
    ws();
    if (pos_ < t_.size() && t_[pos_] == ']') { ++pos_; return true; }
    while (true) {
      ws();
      v->arr.emplace_back();
      if (!value(&v->arr.back(), depth + 1)) return false;
      ws();
      if (pos_ >= t_.size()) return fail("unterminated array");
      if (t_[pos_] == ',') { ++pos_; continue; }
      if (t_[pos_] == ']') { ++pos_; return true; }
      return fail("expected ',' or ']'");
    }
  }

  bool object(Value* v, int depth) {
    ++pos_;
    v->kind = Value::Kind::Object;
    ws();
    if (pos_ < t_.size() && t_[pos_] == '}') { ++pos_; return true; }
    while (true) {
      ws();
      if (pos_ >= t_.size() || t_[pos_] != '"') return fail("expected a key string");
      std::string key;
      if (!string(&key)) return false;
      ws();
      if (pos_ >= t_.size() || t_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      ws();
      Value item;
      if (!value(&item, depth + 1)) return false;
      v->obj[key] = std::move(item);
      ws();
      if (pos_ >= t_.size()) return fail("unterminated object");
      if (t_[pos_] == ',') { ++pos_; continue; }
      if (t_[pos_] == '}') { ++pos_; return true; }
      return fail("expected ',' or '}'");
    }
  }

  const std::string& t_;
  size_t pos_ = 0;
  std::string err_;
};

}  // namespace

bool parse(const std::string& text, Value* out, std::string* error) {
  *out = Value{};
  return Parser(text).run(out, error);
}

}  // namespace capplan::rt::json
