// Typed, diagnosed access to yaml-cpp maps (see yaml_reader.h) and small YAML output helpers.
#include "yaml_reader.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "planner/json_writer.h"
#include "planner/limits.h"
#include "planner/spec_io.h"

namespace capplan::detail {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

bool looks_non_finite(const std::string& s) {
  const std::string l = lower(s);
  return l == "nan" || l == ".nan" || l == "inf" || l == ".inf" || l == "-inf" || l == "-.inf" ||
         l == "+inf" || l == "+.inf" || l == "infinity" || l == "-infinity";
}

namespace {

std::string kind_of(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    default: return "'" + n.Scalar() + "'";
  }
}

std::string describe_limits(const Limits& l) {
  std::ostringstream os;
  os << (l.lo_exclusive ? "> " : ">= ") << yaml_number(l.lo) << " and <= " << yaml_number(l.hi);
  return os.str();
}

}  // namespace

Position position_of(const YAML::Node& node) {
  if (!node.IsDefined()) return {};
  const YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

MapReader::MapReader(const YAML::Node& map, std::string file, std::string prefix,
                     Diagnostics& diags)
    : map_(map), file_(std::move(file)), prefix_(std::move(prefix)), diags_(diags) {}

YAML::Node MapReader::node_of(const std::string& key) const {
  if (!map_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map_.begin(); it != map_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool MapReader::has(const std::string& key) const { return node_of(key).IsDefined(); }

std::string MapReader::first_present(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (has(k)) return k;
  return {};
}

YAML::Node MapReader::child(const std::string& key) {
  known_.push_back(key);
  return node_of(key);
}

Position MapReader::where(const std::string& key) const {
  if (!map_.IsMap()) return position_of(map_);
  for (auto it = map_.begin(); it != map_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) {
      const Position p = position_of(it->second);
      return p.line > 0 ? p : position_of(it->first);
    }
  }
  return position_of(map_);
}

void MapReader::missing(const std::string& key, const std::string& what) {
  const Position p = position_of(map_);
  diags_.error(file_, p.line, p.column, prefix_ + key,
               "missing required key" + (what.empty() ? std::string() : " (" + what + ")"));
}

void MapReader::error_at(const YAML::Node& node, const std::string& key, const std::string& message,
                         const std::string& hint) {
  Position p = position_of(node);
  if (p.line == 0) p = where(key);
  diags_.error(file_, p.line, p.column, prefix_ + key, message, hint);
}

std::optional<std::string> MapReader::scalar(const std::string& key, bool required,
                                             const char* expected) {
  known_.push_back(key);
  const YAML::Node n = node_of(key);
  if (!n.IsDefined()) {
    if (required) missing(key, expected);
    return std::nullopt;
  }
  if (n.IsNull()) {
    if (required) error_at(n, key, std::string("expected ") + expected + ", found nothing");
    return std::nullopt;
  }
  if (!n.IsScalar()) {
    error_at(n, key, std::string("expected ") + expected + ", found " + kind_of(n));
    return std::nullopt;
  }
  return n.Scalar();
}

bool MapReader::number(const std::string& key, double& out, bool required, Limits limits) {
  const auto s = scalar(key, required, "a number");
  if (!s) return false;
  const YAML::Node n = node_of(key);
  if (looks_non_finite(*s)) {
    error_at(n, key, "must be a finite number, found '" + *s + "'");
    return false;
  }
  const auto v = parse_number(*s);
  if (!v) {
    error_at(n, key, "expected a number, found '" + *s + "'");
    return false;
  }
  const bool low = limits.lo_exclusive ? !(*v > limits.lo) : !(*v >= limits.lo);
  if (!low && *v != 0 && std::fabs(*v) < limits.min_nonzero) {
    error_at(n, key, "too small: must be 0 or at least " + yaml_number(limits.min_nonzero) +
                         ", found " + *s);
    return false;
  }
  if (low || *v > limits.hi) {
    std::string msg = "must be " + describe_limits(limits) + ", found " + *s;
    if (*v == 0 && limits.lo == 0 && limits.lo_exclusive) msg = "must be > 0, found " + *s;
    else if (*v < 0 && limits.lo >= 0) msg = "must not be negative, found " + *s;
    else if (*v > limits.hi) msg = "too large: must be <= " + yaml_number(limits.hi) + ", found " + *s;
    error_at(n, key, msg);
    return false;
  }
  out = *v;
  return true;
}

bool MapReader::integer64(const std::string& key, int64_t& out, bool required, Limits limits) {
  double v = 0;
  if (!number(key, v, required, limits)) return false;
  if (v != std::floor(v)) {
    error_at(node_of(key), key, "expected a whole number, found " + node_of(key).Scalar());
    return false;
  }
  out = int64_t(v);
  return true;
}

bool MapReader::integer(const std::string& key, int& out, bool required, Limits limits) {
  limits.hi = std::min(limits.hi, double(std::numeric_limits<int>::max()));
  int64_t v = 0;
  if (!integer64(key, v, required, limits)) return false;
  out = int(v);
  return true;
}

bool MapReader::text(const std::string& key, std::string& out, bool required) {
  const auto s = scalar(key, required, "a string");
  if (!s) return false;
  // Names end up in file headers, scripts and command lines: no control characters. `source`
  // is free text (a folded multi-line note is fine) and only ever written quoted.
  size_t at = 0;
  if (key != "source" && has_control_char(*s, &at)) {
    error_at(node_of(key), key,
             "must not contain control characters (found byte " +
                 std::to_string(static_cast<unsigned char>((*s)[at])) + " at character " +
                 std::to_string(at + 1) + ")");
    return false;
  }
  out = *s;
  return true;
}

bool MapReader::boolean(const std::string& key, bool& out, bool required) {
  const auto s = scalar(key, required, "true or false");
  if (!s) return false;
  const std::string l = lower(*s);
  if (l == "true" || l == "yes" || l == "on") {
    out = true;
    return true;
  }
  if (l == "false" || l == "no" || l == "off") {
    out = false;
    return true;
  }
  error_at(node_of(key), key, "expected true or false, found '" + *s + "'");
  return false;
}

void MapReader::finish() {
  if (!map_.IsMap()) return;
  // Hash sets: one pass over the keys (a file of millions of keys is checked in linear time).
  // The first ResourceLimits::max_key_diagnostics problems are listed one by one, the rest
  // counted in one line.
  const std::unordered_set<std::string> known(known_.begin(), known_.end());
  std::unordered_set<std::string> seen;
  seen.reserve(map_.size());
  int64_t listed = 0, more = 0;
  for (auto it = map_.begin(); it != map_.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
    const bool repeated = !seen.insert(key).second;
    if (!repeated && known.count(key)) continue;
    if (listed == ResourceLimits::max_key_diagnostics) {
      ++more;
      continue;
    }
    ++listed;
    const Position p = position_of(it->first);
    if (repeated) {
      diags_.error(file_, p.line, p.column, prefix_ + key,
                   "given more than once (the first one is used)");
      continue;
    }
    const std::string near = closest_match(key, known_);
    diags_.error(file_, p.line, p.column, prefix_ + key, "unknown key",
                 near.empty() ? std::string() : "did you mean '" + near + "'?");
  }
  if (more > 0) {
    const Position p = position_of(map_);
    diags_.error(file_, p.line, p.column, prefix_.empty() ? std::string() : prefix_.substr(0, prefix_.size() - 1),
                 std::to_string(more) + " more unknown or repeated keys not listed (at most " +
                     std::to_string(ResourceLimits::max_key_diagnostics) + " are listed per map)");
  }
}

namespace {

// The first pass over a YAML text: yaml-cpp's event parser, counting nodes and stopping at
// ResourceLimits::max_yaml_nodes before any node tree is built (a tree of millions of nodes
// takes seconds to build and gigabytes to hold).
class NodeCounter : public YAML::EventHandler {
 public:
  struct OverLimit {
    YAML::Mark mark;
  };
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { count(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { count(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                const std::string&) override {
    count(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    count(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    count(m);
  }
  void OnMapEnd() override {}

 private:
  void count(const YAML::Mark& m) {
    if (++nodes_ > ResourceLimits::max_yaml_nodes) throw OverLimit{m};
  }
  int64_t nodes_ = 0;
};

}  // namespace

bool parse_yaml_text(const std::string& text, const std::string& file, YAML::Node& out,
                     Diagnostics& diags) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    NodeCounter counter;
    parser.HandleNextDocument(counter);
    out = YAML::Load(text);
    return true;
  } catch (const NodeCounter::OverLimit& over) {
    diags.error(file, over.mark.line + 1, over.mark.column + 1, "",
                "too many YAML nodes: more than " + std::to_string(ResourceLimits::max_yaml_nodes) +
                    " (the limit for one input file, counting every key, value, map and list); "
                    "nothing was read");
    return false;
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int col = e.mark.is_null() ? 0 : e.mark.column + 1;
    diags.error(file, line, col, "", "malformed YAML: " + e.msg);
    return false;
  }
}

bool read_text_file(const std::string& path, std::string& out, std::string& error) {
  return read_input_file(path, out, error);
}

bool path_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec) && !ec;
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && !ec;
}

std::string yaml_quote(const std::string& s) {
  bool plain = !s.empty();
  for (unsigned char c : s) {
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '/' || c == ' ' || c == '(' ||
          c == ')' || c == '+' || c == '=' || c == ';')) {
      plain = false;
      break;
    }
  }
  if (plain && (s.front() == ' ' || s.back() == ' ' || s.front() == '-')) plain = false;
  // Words YAML would read as something else than a string.
  const std::string l = lower(s);
  if (l == "true" || l == "false" || l == "yes" || l == "no" || l == "on" || l == "off" ||
      l == "null" || l == "~" || parse_number(s))
    plain = false;
  if (plain) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (c == '\n') {
      q += "\\n";
    } else if (c == '\t') {
      q += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      q += buf;
    } else {
      q += c;
    }
  }
  q += '"';
  return q;
}

std::string comment_text(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

bool has_control_char(const std::string& s, size_t* where) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      if (where) *where = i;
      return true;
    }
  }
  return false;
}

std::string yaml_number(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return shortest_number(v);
}

}  // namespace capplan::detail
