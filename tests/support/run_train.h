// A command of the build run as a user would, with this build's capplan-train (CAPPLAN_TRAIN, a
// compile definition of the test) and Open MPI allowed to run as root.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "planner/shell_quote.h"
#include "support/run_program.h"

namespace capplan::test {

// argv[0] with argv[1..], each quoted here.
inline ProgramRun run_with_this_train(const std::vector<std::string>& argv, int timeout_s = 300) {
  ::setenv("CAPPLAN_TRAIN", CAPPLAN_TRAIN, 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  return run_program(argv.front(), shell_quote(args), timeout_s);
}

}  // namespace capplan::test
