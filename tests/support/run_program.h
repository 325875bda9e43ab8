// Running a program of the build as a process, as a user would from a shell: the tests of the
// command line run it in the source folder (so tests/data/ paths work), with stdin from /dev/null,
// both output streams captured, and a time limit (status 124: it hung and was killed).
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "support/test_files.h"

namespace capplan::test {

struct ProgramRun {
  int status = -1;   // exit status; 128 + signal when killed by one
  std::string out;   // stdout
  std::string err;   // stderr
  double wall_s = 0;
};

// `program ARGS` (ARGS as shell words, already quoted by the caller) in `dir`.
inline ProgramRun run_program(const std::string& program, const std::string& args, int timeout_s = 300,
                              const std::string& dir = CAPPLAN_SOURCE_DIR) {
  static int counter = 0;
  const std::filesystem::path base = scratch_root() / ("run-" + std::to_string(counter++));
  std::filesystem::create_directories(base.parent_path());
  const std::string cmd = "cd '" + dir + "' && timeout " + std::to_string(timeout_s) + " '" + program + "' " + args +
                          " >'" + base.string() + ".out' 2>'" + base.string() + ".err' </dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  const int raw = std::system(cmd.c_str());
  ProgramRun r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = read_text(base.string() + ".out");
  r.err = read_text(base.string() + ".err");
  std::filesystem::remove(base.string() + ".out");
  std::filesystem::remove(base.string() + ".err");
  return r;
}

}  // namespace capplan::test
