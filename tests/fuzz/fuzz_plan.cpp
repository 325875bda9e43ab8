// Fuzz target: plan YAML (parse_plan_yaml). A plan that loads is written back and must load
// again with the same layout (plan_to_yaml quotes every name).
#include "fuzz_check.h"
#include "planner/plan_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  const auto p = capplan::parse_plan_yaml(t, "fuzz.yaml");
  capplan::fuzz::check_loaded(p, "plan", t);
  if (p.ok()) {
    const std::string saved = capplan::plan_to_yaml(*p.value);
    const auto back = capplan::parse_plan_yaml(saved, "saved.yaml");
    if (!back.ok()) capplan::fuzz::fail("plan", "saved plan does not load: " + back.diagnostics.to_string() + "\n" + saved, t);
    if (back.value->layout.dp != p.value->layout.dp || back.value->layout.tp != p.value->layout.tp ||
        back.value->layout.pp != p.value->layout.pp || back.value->scenario.model.name != p.value->scenario.model.name)
      capplan::fuzz::fail("plan", "saved plan loads differently:\n" + saved, t);
  }
  return 0;
}
