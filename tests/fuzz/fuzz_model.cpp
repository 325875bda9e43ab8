// Fuzz target: model YAML (parse_model_yaml).
#include "fuzz_check.h"
#include "planner/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  const auto m = capplan::parse_model_yaml(t, "fuzz.yaml");
  capplan::fuzz::check_loaded(m, "model", t);
  // A model that loads passes the semantic checks it was loaded with.
  if (m.ok()) {
    capplan::Diagnostics again;
    capplan::validate_model(*m.value, "fuzz.yaml", again);
    if (again.has_errors()) capplan::fuzz::fail("model", "loaded but invalid: " + again.to_string(), t);
  }
  return 0;
}
