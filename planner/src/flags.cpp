// The flag parser of capplan and capplan-train (see planner/flags.h).
#include "planner/flags.h"

#include <cmath>
#include <cstdio>

#include "planner/json_writer.h"
#include "planner/spec_io.h"

namespace capplan {

namespace {

std::vector<std::string> flag_names(const std::vector<FlagSpec>& flags) {
  std::vector<std::string> out;
  for (const auto& f : flags) out.push_back(f.name);
  return out;
}

const FlagSpec* find_flag(const std::vector<FlagSpec>& flags, const std::string& name) {
  for (const auto& f : flags)
    if (f.name == name) return &f;
  return nullptr;
}

std::string hint_of(const std::string& near) {
  return near.empty() ? std::string() : "did you mean '" + near + "'?";
}

}  // namespace

void flag_error(Diagnostics& diags, const std::string& flag, const std::string& message,
                const std::string& hint) {
  diags.error(kCommandLine, 0, 0, "--" + flag, message, hint);
}

std::string flags_help(const std::vector<FlagSpec>& flags) {
  std::string out;
  for (const auto& f : flags) {
    const std::string left = "--" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    char line[64];
    std::snprintf(line, sizeof line, "  %-18s ", left.c_str());
    out += line + f.help + "\n";
  }
  return out;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

Args parse_args(int argc, const char* const* argv, const std::vector<FlagSpec>& flags, Diagnostics& diags,
                size_t max_positional, RepeatedFlags repeated) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      args.help_ = true;
      continue;
    }
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      std::string name = a.substr(2), value;
      bool inline_value = false;
      if (const auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        inline_value = true;
      }
      const FlagSpec* spec = find_flag(flags, name);
      if (!spec) {
        flag_error(diags, name, "unknown flag",
                   hint_of(closest_match(name, flag_names(flags)).empty()
                               ? std::string()
                               : "--" + closest_match(name, flag_names(flags))));
        // Skip its value, if it seems to have one, so it is not taken as positional.
        if (!inline_value && i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) ++i;
        continue;
      }
      if (spec->takes_value && !inline_value) {
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
          flag_error(diags, name, "needs a value" +
                                      (spec->value_name.empty() ? std::string()
                                                                : " (" + spec->value_name + ")"));
          continue;
        }
        value = argv[++i];
      } else if (!spec->takes_value && inline_value) {
        flag_error(diags, name, "takes no value, found '" + value + "'");
        continue;
      }
      if (args.values_.count(name) && repeated == RepeatedFlags::Error) {
        flag_error(diags, name, "given more than once");
        continue;
      }
      args.values_[name] = value;
      continue;
    }
    if (args.positional_.size() >= max_positional) {
      diags.error(kCommandLine, 0, 0, "", "unexpected argument '" + a + "'");
      continue;
    }
    args.positional_.push_back(a);
  }
  return args;
}

std::optional<int64_t> int_flag(const Args& args, const std::string& name, Diagnostics& diags,
                                int64_t min, int64_t max) {
  if (!args.has(name)) return std::nullopt;
  const std::string s = args.get(name);
  const auto v = parse_number(s);
  if (!v) {
    flag_error(diags, name, "expected a whole number, found '" + s + "'");
    return std::nullopt;
  }
  if (*v != std::floor(*v)) {
    flag_error(diags, name, "expected a whole number, found " + s);
    return std::nullopt;
  }
  if (*v < double(min) || *v > double(max)) {
    std::string msg = "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                      ", found " + s;
    if (*v <= 0 && min == 1) msg = "must be > 0, found " + s;
    flag_error(diags, name, msg);
    return std::nullopt;
  }
  return int64_t(*v);
}

std::optional<double> number_flag(const Args& args, const std::string& name, Diagnostics& diags,
                                  double min_exclusive, double max) {
  if (!args.has(name)) return std::nullopt;
  const std::string s = args.get(name);
  const auto v = parse_number(s);
  if (!v) {
    flag_error(diags, name, "expected a finite number, found '" + s + "'");
    return std::nullopt;
  }
  if (!(*v > min_exclusive) || *v > max) {
    flag_error(diags, name,
               *v > max ? "too large: must be <= " + JsonWriter::number(max) + ", found " + s
                        : "must be > " + JsonWriter::number(min_exclusive) + ", found " + s);
    return std::nullopt;
  }
  return *v;
}

void require_flag(const Args& args, const std::string& name, Diagnostics& diags,
                  const std::string& what) {
  if (!args.has(name)) flag_error(diags, name, "required (" + what + ")");
}

}  // namespace capplan
