// capplan command line: dispatches to subcommands through the table below. Each command is
// `int cmd_<name>(int argc, char** argv)` with argv[0] = the command name (cli_common.h).
// Exit status: 0 ok, 2 bad input or invalid layout, 1 other failure.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_common.h"

namespace capplan::cli {
int cmd_estimate(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_validate(int argc, char** argv);
int cmd_models(int argc, char** argv);
int cmd_clusters(int argc, char** argv);
int cmd_frameworks(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
}  // namespace capplan::cli

namespace {

struct Command {
  const char* name;
  int (*entry)(int argc, char** argv);
  const char* summary;
};

// One line per command.
const Command kCommands[] = {
    {"estimate", capplan::cli::cmd_estimate, "memory, step time, days and dollars of one layout"},
    {"plan", capplan::cli::cmd_plan, "search every layout and rank them"},
    {"profile", capplan::cli::cmd_profile, "per-layer parameters, FLOPs and activation bytes"},
    {"validate", capplan::cli::cmd_validate, "compare predictions with measured runs (MAPE)"},
    {"models", capplan::cli::cmd_models, "list the model presets"},
    {"clusters", capplan::cli::cmd_clusters, "list the cluster/instance and GPU presets"},
    {"frameworks", capplan::cli::cmd_frameworks, "list the framework presets and the layouts each can run"},
    {"simulate", capplan::cli::cmd_simulate, "discrete-event simulation of a step (timeline) and of a run"},
    {"export", capplan::cli::cmd_export, "a plan as smp_options, Megatron-LM args, DeepSpeed config or sbatch"},
    {"compare", capplan::cli::cmd_compare, "plans side by side: memory, step time by term, days and dollars as deltas"},
    {"run", capplan::cli::cmd_run, "launch capplan-train on a plan's layout, measured vs predicted"},
    {"calibrate", capplan::cli::cmd_calibrate, "fit a cluster's efficiencies to measured runs' terms"},
};

void usage(std::FILE* to) {
  std::fprintf(to, "usage: capplan <command> [options]   (capplan <command> --help)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(to, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return capplan::cli::kExitBadInput;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return capplan::cli::kExitOk;
  }
  if (name == "--version") {
    std::printf("capplan %s\n", CAPPLAN_VERSION);
    return capplan::cli::kExitOk;
  }
  std::vector<std::string> names;
  for (const Command& c : kCommands) {
    if (name == c.name) return c.entry(argc - 1, argv + 1);
    names.push_back(c.name);
  }
  const std::string near = capplan::closest_match(name, names);
  std::fprintf(stderr, "<command line>: error: unknown command '%s'%s\n", name.c_str(),
               near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
  usage(stderr);
  return capplan::cli::kExitBadInput;
}
