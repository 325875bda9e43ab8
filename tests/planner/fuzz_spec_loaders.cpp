// Fuzz target for the spec, framework and plan loaders: any input must give either a value or an error,
// never a crash, an exception or both. Built as a libFuzzer target with clang
// (fuzz_spec_loaders_libfuzzer); the same entry point is driven by fuzz_driver.cpp as a test.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "planner/plan_io.h"
#include "planner/spec_io.h"

namespace {

template <class T>
void check(const capplan::Loaded<T>& l, const char* what, const std::string& input) {
  // Invariant of Loaded: a value exactly when there is no error.
  if (l.value.has_value() == l.diagnostics.has_errors()) {
    std::cerr << what << ": value and errors disagree for input:\n" << input << "\n";
    std::abort();
  }
  for (const auto& d : l.diagnostics.items()) {
    if (d.line < 0 || d.column < 0 || d.message.empty()) {
      std::cerr << what << ": malformed diagnostic '" << d.to_string() << "'\n";
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check(capplan::parse_model_yaml(text, "fuzz.yaml"), "model", text);
  check(capplan::parse_model_hf_json(text, "fuzz.json"), "hf", text);
  check(capplan::parse_cluster_yaml(text, "fuzz.yaml"), "cluster", text);
  check(capplan::parse_plan_yaml(text, "fuzz.yaml"), "plan", text);
  check(capplan::parse_framework_yaml(text, "fuzz.yaml"), "framework", text);
  return 0;
}
