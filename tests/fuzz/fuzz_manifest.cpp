// Fuzz target: checkpoint manifests. The input is written as the manifest.json of a step folder
// holding one valid shard, then verified (checkpoint_verify) and searched for
// (checkpoint_find_latest_good): a verdict and a reason, never a crash.
#include "fuzz_check.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace rt = capplan::rt;
  static const std::string dir = (capplan::fuzz::scratch() / "ckpt").string();
  static const bool made = [] {
    const float w[4] = {1, 2, 3, 4};
    const rt::TensorView v{"params", w, 4};
    std::string error;
    return rt::checkpoint_write_shard(dir, 1, 0, {{"model", "m"}}, std::span(&v, 1), &error).has_value();
  }();
  if (!made) capplan::fuzz::fail("manifest", "cannot write the seed shard", "");
  const std::string t = capplan::fuzz::text_of(data, size);
  capplan::fuzz::write_scratch("ckpt/step-000001/manifest.json", t);
  std::string why;
  const auto m = rt::checkpoint_verify(rt::checkpoint_step_dir(dir, 1), &why);
  if (m.has_value() == !why.empty()) capplan::fuzz::fail("manifest", "verdict and reason disagree: " + why, t);
  if (m && (m->world != int(m->shards.size()) || m->shards.empty()))
    capplan::fuzz::fail("manifest", "accepted with a shard list that does not match the world", t);
  const rt::LatestGood lg = rt::checkpoint_find_latest_good(dir, {{"model", "m"}});
  if (lg.manifest.has_value() != m.has_value()) capplan::fuzz::fail("manifest", "latest-good disagrees with verify", t);
  return 0;
}
