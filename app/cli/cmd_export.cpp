// `capplan export`: a plan (a saved plan file or estimate's flags) as the configuration of another
// training stack: SageMaker model parallel `smp_options`, Megatron-LM arguments, a DeepSpeed config,
// or a Slurm sbatch script running capplan-train. The same library call as the GUI's Export dialog.
#include <cstdio>

#include "cli_common.h"
#include "planner/export.h"

namespace capplan::cli {

int cmd_export(int argc, char** argv) {
  const std::vector<FlagSpec> flags = concat(
      concat(scenario_flags(), layout_flags()),
      {plan_file_flag(),
       {"format", true, "smp | megatron | deepspeed | sbatch", "F"},
       {"out", true, "write the file here (atomically) instead of printing it", "FILE"}});
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help("export",
               "--plan FILE --format smp|megatron|deepspeed|sbatch [--out FILE]\n"
               "       capplan export <estimate's flags> --format F [--out FILE]",
               flags);
    return kExitOk;
  }
  require_flag(args, "format", diags, "smp, megatron, deepspeed or sbatch");
  std::optional<ExportFormat> format;
  if (args.has("format")) {
    format = parse_export_format(args.get("format"));
    if (!format)
      diags.error(kCommandLine, 0, 0, "--format",
                  "expected smp, megatron, deepspeed or sbatch, found '" + args.get("format") + "'");
  }
  auto job = scenario_and_layout_from_args(args, diags);
  if (diags.has_errors() || !job || !format) return report(diags);
  report(diags);  // warnings, if any

  Plan plan;
  plan.model_ref = job->scenario.model_ref;
  plan.cluster_ref = job->scenario.cluster_ref;
  plan.scenario = job->scenario.scenario;
  plan.layout = job->layout;
  if (auto broken = check_layout(plan.scenario, plan.layout)) {
    diags.error(args.has("plan") ? args.get("plan") : kCommandLine, 0, 0, "layout",
                "invalid layout: " + *broken);
    return report(diags);
  }
  const ExportedFile f = export_plan(plan, *format);
  for (const std::string& note : f.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (!args.has("out")) {
    std::fputs(f.text.c_str(), stdout);
    return kExitOk;
  }
  if (const std::string err = write_file_atomic(args.get("out"), f.text); !err.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", args.get("out").c_str(), err.c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "wrote %s (%s)\n", args.get("out").c_str(), f.file_name.c_str());
  return kExitOk;
}

}  // namespace capplan::cli
