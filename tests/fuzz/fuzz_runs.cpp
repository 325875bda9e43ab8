// Fuzz target: a runs file of measured runs (parse_validation_yaml, `capplan validate`).
#include "fuzz_check.h"
#include "planner/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  capplan::fuzz::check_loaded(capplan::parse_validation_yaml(t, "fuzz.yaml"), "runs", t);
  return 0;
}
