// Command-line flags, parsed the one way both programs (capplan and capplan-train) parse them:
// "--name value", "--name=value" and switches, with every mistake found in one pass (unknown
// flags with a "did you mean", missing values, repeated flags, extra arguments, bad numbers),
// each a diagnostic naming "<command line>" and the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/diagnostics.h"

namespace capplan {

// Diagnostics about flags name this file; the key path is the flag ("--dp").
inline constexpr const char* kCommandLine = "<command line>";

struct FlagSpec {
  std::string name;          // without dashes: "dp"
  bool takes_value = true;   // false: a switch such as --json
  std::string help;          // one line for --help
  std::string value_name;    // "N", "M", "FILE"; shown in --help
};

// A flag given twice: a mistake (capplan), or the later value replaces the earlier (capplan-train,
// whose callers append overrides to a base command line).
enum class RepeatedFlags { Error, LastWins };

// Flags as parsed; positional arguments in order.
class Args {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // The value of a flag, or `fallback` when absent.
  std::string get(const std::string& name, const std::string& fallback = {}) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }

 private:
  friend Args parse_args(int, const char* const*, const std::vector<FlagSpec>&, Diagnostics&, size_t,
                         RepeatedFlags);
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses argv[1..argc) against `flags` (argv[0] is the command name). Unknown flags (with a
// "did you mean"), missing values, repeated flags (unless LastWins) and extra positional
// arguments are all reported; parsing goes on after an error. `--help`/`-h` sets help().
Args parse_args(int argc, const char* const* argv, const std::vector<FlagSpec>& flags, Diagnostics& diags,
                size_t max_positional = 0, RepeatedFlags repeated = RepeatedFlags::Error);

// Typed values of flags; nullopt when absent or invalid (invalid adds a diagnostic). Numbers
// accept the forms of parse_number ("300e9", "1.5T").
std::optional<int64_t> int_flag(const Args& args, const std::string& name, Diagnostics& diags,
                                int64_t min, int64_t max);
std::optional<double> number_flag(const Args& args, const std::string& name, Diagnostics& diags,
                                  double min_exclusive, double max);
// A required flag that is absent: a diagnostic naming it.
void require_flag(const Args& args, const std::string& name, Diagnostics& diags,
                  const std::string& what);
// A diagnostic about `--flag`.
void flag_error(Diagnostics& diags, const std::string& flag, const std::string& message,
                const std::string& hint = {});
// "  --name VALUE   help" lines, one per flag.
std::string flags_help(const std::vector<FlagSpec>& flags);

}  // namespace capplan
