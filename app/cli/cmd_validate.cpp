// `capplan validate FILE.yaml`: predicted vs measured for each run of a file of measured runs,
// with the error per run and the mean absolute percentage error.
#include <cstdio>

#include "cli_common.h"

namespace capplan::cli {

int cmd_validate(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags, 1);
  if (args.help()) {
    print_help("validate", "FILE.yaml [--json]", flags);
    return kExitOk;
  }
  if (args.positional().empty())
    diags.error(kCommandLine, 0, 0, "", "missing the file of measured runs (FILE.yaml)");
  if (diags.has_errors()) return report(diags);
  std::fprintf(stderr, "capplan validate: not available in this build\n");
  return kExitFailure;
}

}  // namespace capplan::cli
