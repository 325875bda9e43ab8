// Private helpers shared by the spec, catalog and plan loaders: reading typed values out of a
// yaml-cpp map with a diagnostic (file:line:col, key path, expected vs found) for every problem,
// and unknown-key detection with a "did you mean". Not a public header: yaml-cpp stays private
// to the planner library.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/spec.h"

namespace capplan::detail {

// Inclusive/exclusive bounds for a number read from user input.
struct Limits {
  double lo = 0;
  bool lo_exclusive = true;  // true: value must be > lo; false: >= lo
  double hi = 1e18;
  // > 0: a non-zero value must be at least this (0 itself stays allowed, e.g. "unknown"); so
  // 1e-300 GB/s, which would pass "> 0" and make every time infinite, is refused.
  double min_nonzero = 0;
};

struct Position {
  int line = 0;    // 1-based, 0 = unknown
  int column = 0;  // 1-based, 0 = unknown
};

Position position_of(const YAML::Node& node);

// Reads keys of one YAML map. Every accessor marks its key as known; finish() reports the keys
// that no accessor asked for. Accessors return true when a valid value was stored in `out`.
class MapReader {
 public:
  MapReader(const YAML::Node& map, std::string file, std::string prefix, Diagnostics& diags);

  bool integer(const std::string& key, int& out, bool required, Limits limits);
  bool integer64(const std::string& key, int64_t& out, bool required, Limits limits);
  bool number(const std::string& key, double& out, bool required, Limits limits);
  bool text(const std::string& key, std::string& out, bool required);
  bool boolean(const std::string& key, bool& out, bool required);
  template <class E, class Parse>
  bool enumeration(const std::string& key, E& out, Parse parse, const char* choices) {
    std::string s;
    if (!text(key, s, false)) return false;
    if (auto v = parse(s)) {
      out = *v;
      return true;
    }
    error_at(node_of(key), key, "expected one of " + std::string(choices) + ", found '" + s + "'");
    return false;
  }

  // The value node of `key` (undefined when absent); marks the key as known.
  YAML::Node child(const std::string& key);
  bool has(const std::string& key) const;
  // First of the alternative names present (for Hugging Face configs), or empty.
  std::string first_present(const std::vector<std::string>& keys) const;
  // Position of the value of `key`, or of the map when the key is absent.
  Position where(const std::string& key) const;
  void missing(const std::string& key, const std::string& what = {});
  void error_at(const YAML::Node& node, const std::string& key, const std::string& message,
                const std::string& hint = {});
  void finish();  // unknown keys, with a "did you mean"

  const std::string& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }
  Diagnostics& diagnostics() { return diags_; }

 private:
  YAML::Node node_of(const std::string& key) const;
  // The scalar text of a present key; reports wrong types. nullopt when absent or invalid.
  std::optional<std::string> scalar(const std::string& key, bool required, const char* expected);

  YAML::Node map_;
  std::string file_;
  std::string prefix_;
  Diagnostics& diags_;
  std::vector<std::string> known_;
};

// Parses YAML text; on a syntax error adds a diagnostic at the error's position and returns false.
bool parse_yaml_text(const std::string& text, const std::string& file, YAML::Node& out,
                     Diagnostics& diags);
// Reads a whole file; returns false and sets `error` when it cannot be read.
bool read_text_file(const std::string& path, std::string& out, std::string& error);

// Section readers used by spec_io.cpp and plan_io.cpp. `prefix` is the key path, e.g. "model.".
// With keep_invalid the spec is returned as written even when it breaks a rule (heads not
// dividing hidden, ...), the diagnostics saying so: what a draft (an autosave) needs.
std::optional<ModelSpec> read_model_map(const YAML::Node& map, const std::string& file,
                                        const std::string& prefix, Diagnostics& diags,
                                        bool keep_invalid = false);
std::optional<GpuSpec> read_gpu_map(const YAML::Node& map, const std::string& file,
                                    const std::string& prefix, Diagnostics& diags,
                                    bool keep_invalid = false);
std::optional<ClusterSpec> read_cluster_map(const YAML::Node& map, const std::string& file,
                                            const std::string& prefix, Diagnostics& diags,
                                            bool keep_invalid = false);
std::optional<FrameworkSpec> read_framework_map(const YAML::Node& map, const std::string& file,
                                                const std::string& prefix, Diagnostics& diags);
// A framework file's keys found in another map (a validation run's), each read over `f`: every
// key but `name`, `attention` and `source`, which such a map uses with its own meaning.
void read_framework_overrides(MapReader& r, FrameworkSpec& f);

// Non-throwing file system queries (a 5000-character "path" from user input must not throw).
bool path_exists(const std::filesystem::path& p);
bool is_file(const std::filesystem::path& p);

// Text for YAML output: plain when safe, double-quoted otherwise.
std::string yaml_quote(const std::string& s);
// Text for a `#` comment line of a generated YAML file or script: a control character (a newline
// would end the comment and start a key or a command) is written as a visible escape (\n, \x01).
std::string comment_text(const std::string& s);
// Whether `s` holds a control character (< 0x20 or 0x7f); `where` gets its 0-based index.
bool has_control_char(const std::string& s, size_t* where = nullptr);
// Shortest round-trip form of a double ("300000000000", "0.5", "1e-06").
std::string yaml_number(double v);
// `s` in lower case (ASCII).
std::string lower(std::string s);
// Whether `s` spells a non-finite number as YAML or C would ("nan", ".inf", "-Infinity", ...).
bool looks_non_finite(const std::string& s);

}  // namespace capplan::detail
