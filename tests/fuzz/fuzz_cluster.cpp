// Fuzz target: cluster YAML (parse_cluster_yaml), GPU maps inline or by catalog name.
#include "fuzz_check.h"
#include "planner/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  const auto c = capplan::parse_cluster_yaml(t, "fuzz.yaml");
  capplan::fuzz::check_loaded(c, "cluster", t);
  if (c.ok()) {
    capplan::Diagnostics again;
    capplan::validate_cluster(*c.value, "fuzz.yaml", again);
    if (again.has_errors()) capplan::fuzz::fail("cluster", "loaded but invalid: " + again.to_string(), t);
  }
  return 0;
}
