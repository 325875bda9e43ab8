// The CPU communicator's ring reduce-scatter in real MPI processes (reduce_scatter_check.cpp under
// mpirun): for 2, 3, 4 and 8 ranks, equal and uneven blocks (some empty), in place and not, every
// rank's block is the sum of all ranks' values. Expectation: exit 0 and "0 mismatches" on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "launch/launch.h"

namespace capplan::rt {
namespace {

TEST(ReduceScatter, RingSumsEveryBlockForAnyRanksAndBlockSizes) {
  for (int ranks : {2, 3, 4, 8}) {
    std::vector<std::string> argv = {CAPPLAN_MPIEXEC};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks), CAPPLAN_CHECK});
    ProcessOptions opt;
    opt.env = mpi_transport_env();
    std::string out;
    const ProcessResult p =
        run_process(argv, opt, [&](OutputStream, const std::string& line) { out += line + "\n"; });
    ASSERT_TRUE(p.started) << p.error;
    EXPECT_EQ(p.exit_code, 0) << ranks << " ranks:\n" << out;
    for (int r = 0; r < ranks; ++r)
      EXPECT_NE(out.find("rank " + std::to_string(r) + " of " + std::to_string(ranks) + ": 0 mismatches"),
                std::string::npos)
          << out;
  }
}

}  // namespace
}  // namespace capplan::rt
