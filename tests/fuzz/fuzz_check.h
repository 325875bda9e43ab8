// Shared checks of the loader fuzz targets: any input gives a value or diagnostics, never a crash,
// an exception or both; every diagnostic is well formed. Inputs that must be files (token shards,
// checkpoint manifests) are written to one scratch file per process first.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>

#include "planner/diagnostics.h"

namespace capplan::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

[[noreturn]] inline void fail(const char* what, const std::string& why, const std::string& input) {
  std::cerr << what << ": " << why << "\ninput (" << input.size() << " bytes):\n"
            << input.substr(0, 4000) << "\n";
  std::abort();
}

inline void check_diagnostics(const Diagnostics& d, const char* what, const std::string& input) {
  for (const auto& item : d.items())
    if (item.line < 0 || item.column < 0 || item.message.empty())
      fail(what, "malformed diagnostic '" + item.to_string() + "'", input);
}

// Invariant of Loaded: a value exactly when there is no error.
template <class T>
void check_loaded(const Loaded<T>& l, const char* what, const std::string& input) {
  if (l.value.has_value() == l.diagnostics.has_errors())
    fail(what, "value and errors disagree", input);
  check_diagnostics(l.diagnostics, what, input);
}

// A scratch folder of this process (under $TMPDIR), created once and removed when the process
// exits normally. A failing input aborts, which leaves the folder and its last file to inspect.
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() / ("capplan-fuzz-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const std::filesystem::path& scratch() {
  static const ScratchDir dir;
  return dir.path();
}

inline std::string write_scratch(const std::string& relative, const std::string& bytes) {
  const std::filesystem::path p = scratch() / relative;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  return p.string();
}

}  // namespace capplan::fuzz
