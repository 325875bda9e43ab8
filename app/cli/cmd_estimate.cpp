// `capplan estimate`: memory, step time, throughput, days and dollars of one explicit layout.
// An invalid layout (a hard constraint broken) exits 2 naming the constraint; a layout that does
// not fit in memory still gets its figures, with fits: false and the reason.
#include <cstdio>

#include "cli_common.h"

namespace capplan::cli {

int cmd_estimate(int argc, char** argv) {
  const std::vector<FlagSpec> flags =
      concat(concat(scenario_flags(), layout_flags()), {plan_file_flag(), json_flag()});
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("estimate",
               "--model M --cluster C --nodes N [--gpus N] --dp D --tp T --pp P [--vp V] "
               "--mbs B --gbs G [options] [--json]\n       capplan estimate --plan FILE [--json]",
               flags);
    return kExitOk;
  }
  auto job = scenario_and_layout_from_args(args, diags);
  if (diags.has_errors() || !job) return report(diags);
  report(diags);  // warnings, if any

  const Scenario& scenario = job->scenario.scenario;
  if (auto broken = check_layout(scenario, job->layout)) {
    diags.error(args.has("plan") ? args.get("plan") : kCommandLine, 0, 0, "layout",
                "invalid layout: " + *broken);
    return report(diags);
  }
  const Estimate e = estimate(scenario, job->layout);
  if (args.has("json"))
    std::printf("%s\n", estimate_json(e).c_str());
  else
    std::printf("%s", estimate_text(scenario, e).c_str());
  return kExitOk;
}

}  // namespace capplan::cli
