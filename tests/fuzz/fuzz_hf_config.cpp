// Fuzz target: Hugging Face config.json (parse_model_hf_json).
#include "fuzz_check.h"
#include "planner/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  const auto m = capplan::parse_model_hf_json(t, "config.json");
  capplan::fuzz::check_loaded(m, "hf_config", t);
  // Names end up in scripts: one that loads holds no control character.
  if (m.ok())
    for (unsigned char c : m.value->name)
      if (c < 0x20 || c == 0x7f) capplan::fuzz::fail("hf_config", "name with a control character", t);
  return 0;
}
