// Files for tests: a fresh scratch folder per test under one folder per test process (removed
// when the process's tests end), and whole-file reads.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace capplan::test {

// <tmp>/capplan-test-<pid>: every scratch folder of this test process lives here.
inline std::filesystem::path scratch_root() {
  return std::filesystem::temp_directory_path() / ("capplan-test-" + std::to_string(::getpid()));
}

namespace detail {
class ScratchCleanup : public testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(scratch_root(), ec);
  }
};
inline testing::Environment* const scratch_cleanup =
    testing::AddGlobalTestEnvironment(new ScratchCleanup);
}  // namespace detail

// An empty folder named `name` under scratch_root() (emptied if it exists).
inline std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path d = scratch_root() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// The whole file as text; empty when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace capplan::test
