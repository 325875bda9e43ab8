// `capplan compare`: plans side by side as deltas against the first (the baseline), from plan
// files or from a comparison file (the GUI's Compare page saves the same format); --save writes
// the comparison. The figures and deltas are compare_plans'.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli_common.h"
#include "planner/compare.h"

namespace capplan::cli {
namespace {

std::string figure_text(double v, const std::string& unit) {
  char buf[64];
  if (!std::isfinite(v)) return "unknown";
  if (unit == "USD" && v >= 1e6) std::snprintf(buf, sizeof buf, "$%.3f M", v / 1e6);
  else if (unit == "USD") std::snprintf(buf, sizeof buf, "$%.0f", v);
  else if (unit == "GPUs") std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (unit == "s") std::snprintf(buf, sizeof buf, "%.3g s", v);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, unit.c_str());
  return buf;
}

std::string delta_text(const FigureDelta& f) {
  if (!std::isfinite(f.delta)) return "(unknown)";
  if (f.delta == 0) return "(same)";
  const std::string size = figure_text(std::abs(f.delta), f.unit);
  char buf[96];
  if (std::isfinite(f.relative))
    std::snprintf(buf, sizeof buf, "(%c%s, %+.1f %%)", f.delta > 0 ? '+' : '-', size.c_str(), f.relative * 100);
  else
    std::snprintf(buf, sizeof buf, "(%c%s)", f.delta > 0 ? '+' : '-', size.c_str());
  return buf;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {
      {"file", true, "a comparison file to read instead of plan files", "FILE"},
      {"save", true, "write the comparison to FILE (atomically)", "FILE"},
      json_flag(),
  };
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags, 64);
  if (args.help()) {
    print_help("compare", "BASELINE.yaml PLAN.yaml... [--save FILE] [--json]\n"
                          "       capplan compare --file COMPARISON.yaml [--json]", flags);
    return kExitOk;
  }
  if (diags.has_errors()) return report(diags);
  Comparison c;
  if (args.has("file")) {
    if (!args.positional().empty())
      diags.error(kCommandLine, 0, 0, "file", "give --file or plan files, not both");
    Loaded<Comparison> loaded = load_comparison(args.get("file"));
    diags.append(loaded.diagnostics);
    if (loaded.value) c = *loaded.value;
  } else {
    if (args.positional().size() < 2)
      diags.error(kCommandLine, 0, 0, "", "expected a baseline plan file and at least one other");
    for (const std::string& path : args.positional()) {
      Loaded<Plan> p = load_plan(path);
      diags.append(p.diagnostics);
      if (p.value) c.plans.push_back({std::filesystem::path(path).filename().string(), *p.value});
    }
  }
  if (diags.has_errors()) return report(diags);
  report(diags);
  if (args.has("save")) {
    const std::string err = save_comparison(c, args.get("save"));
    if (!err.empty()) {
      std::fprintf(stderr, "capplan compare: %s\n", err.c_str());
      return kExitFailure;
    }
  }
  const ComparisonResult r = compare_plans(c);
  if (args.has("json")) {
    JsonWriter w(true);
    w.begin_object().begin_array("plans");
    for (const ComparedPlan& p : r.plans) {
      w.begin_object("").str("label", p.label).boolean("fits", p.estimate.fits).begin_object("figures");
      for (const FigureDelta& f : p.figures)
        w.begin_object(f.key).num("value", f.value).num("delta", f.delta).num("relative", f.relative).end_object();
      w.end_object().end_object();
    }
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  std::printf("baseline: %s\n", r.plans.front().label.c_str());
  for (size_t i = 1; i < r.plans.size(); ++i) std::printf("plan %zu:   %s\n", i, r.plans[i].label.c_str());
  std::printf("\n%-18s %-16s", "figure", "baseline");
  for (size_t i = 1; i < r.plans.size(); ++i) std::printf(" plan %-27zu", i);
  std::printf("\n");
  for (size_t k = 0; k < r.plans.front().figures.size(); ++k) {
    const FigureDelta& b = r.plans.front().figures[k];
    std::printf("%-18s %-16s", b.label.c_str(), figure_text(b.value, b.unit).c_str());
    for (size_t i = 1; i < r.plans.size(); ++i) {
      const FigureDelta& f = r.plans[i].figures[k];
      std::printf(" %-32s", (figure_text(f.value, f.unit) + " " + delta_text(f)).c_str());
    }
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace capplan::cli
