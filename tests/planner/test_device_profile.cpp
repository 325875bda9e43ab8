// Device profiles: the fits recover the curves their timings came from, the YAML form reads back,
// bad files are refused with the reason, and the cost model uses a profile in place of the roofline.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "planner/spec_io.h"
#include "simulator/step_simulation.h"

namespace capplan {
namespace {

// A profile of an A100 at GPT-3 13B's block shape whose GEMMs follow t = 8 us + FLOPs / 100 TFLOP/s
// exactly, kernels run at 1 TB/s and a 4-rank all-reduce at 50 GB/s bus bandwidth + 20 us.
DeviceProfile synthetic_profile() {
  DeviceProfile p;
  p.device = "test: synthetic A100";
  p.gpu = "A100-SXM4-40GB";
  p.backend = "cuda";
  p.created_utc = "2026-01-01T00:00:00Z";
  p.how = "synthetic";
  p.ranks = 4;
  p.peak_rank_bytes = 3.5e9;
  p.model = "gpt3-13b";
  p.hidden = 5120;
  p.heads = 40;
  p.ffn_hidden = 20480;
  p.vocab = 50257;
  p.seq = 2048;
  p.mbs = 1;
  p.tp = 1;
  const double peak = 100e12, t0 = 8e-6;
  for (int64_t m : {256, 1024, 4096})
    for (int64_t n : {512, 5120}) {
      GemmTiming g;
      g.name = "g";
      g.m = m;
      g.n = n;
      g.k = 5120;
      g.seconds = t0 + 2.0 * double(m * n * g.k) / peak;
      p.gemms.push_back(g);
    }
  for (double bytes : {1e6, 1e8}) p.kernels.push_back({"norm forward", bytes, bytes / 1e12});
  for (double bytes : {1e4, 1e6, 1e8})
    p.collectives.push_back({"all-reduce", 4, bytes, 20e-6 + 2.0 * 3 / 4 * bytes / 50e9});
  fit_device_profile(p);
  return p;
}

TEST(DeviceProfile, FitsRecoverTheCurvesOfTheTimings) {
  const DeviceProfile p = synthetic_profile();
  std::printf("Expectation: GEMM 100000 GFLOP/s + 8 us, 1000 GB/s, all-reduce 50 GB/s + 20 us  Actual: %.1f + %.3f, "
              "%.1f, %.2f + %.3f\n",
              p.gemm_peak_gflops, p.gemm_overhead_us, p.memory_gbyte_per_s, p.fits.at(0).bandwidth_gbyte_per_s,
              p.fits.at(0).latency_us);
  EXPECT_NEAR(p.gemm_peak_gflops, 100000, 1);
  EXPECT_NEAR(p.gemm_overhead_us, 8, 1e-3);
  EXPECT_NEAR(p.memory_gbyte_per_s, 1000, 1e-6);
  ASSERT_EQ(p.fits.size(), 1u);
  EXPECT_NEAR(p.fits[0].bandwidth_gbyte_per_s, 50, 1e-3);
  EXPECT_NEAR(p.fits[0].latency_us, 20, 1e-3);
}

TEST(DeviceProfile, YamlReadsBackExactly) {
  const DeviceProfile p = synthetic_profile();
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->device, p.device);
  EXPECT_EQ(q.value->gpu, p.gpu);
  EXPECT_EQ(q.value->hidden, p.hidden);
  EXPECT_EQ(q.value->peak_rank_bytes, p.peak_rank_bytes);
  EXPECT_GT(q.value->peak_rank_bytes, 0);
  ASSERT_EQ(q.value->gemms.size(), p.gemms.size());
  for (size_t i = 0; i < p.gemms.size(); ++i) EXPECT_EQ(q.value->gemms[i].seconds, p.gemms[i].seconds);
  EXPECT_EQ(q.value->gemm_peak_gflops, p.gemm_peak_gflops);
  EXPECT_EQ(q.value->collectives.size(), p.collectives.size());
  EXPECT_EQ(q.value->fits.at(0).latency_us, p.fits.at(0).latency_us);
}

// Timings sit in flow mappings ({name: ..., seconds: ...}), where a plain comma would end the
// name: a name with one ("qkv forward, half the tokens") is quoted and reads back whole.
TEST(DeviceProfile, NamesWithCommasReadBack) {
  DeviceProfile p = synthetic_profile();
  p.gemms.at(0).name = "qkv forward, half the tokens";
  p.kernels.at(0).name = "norm forward, {a: b}, [c]";
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->gemms.at(0).name, "qkv forward, half the tokens");
  EXPECT_EQ(q.value->kernels.at(0).name, "norm forward, {a: b}, [c]");
  EXPECT_EQ(q.value->gemms.at(0).seconds, p.gemms.at(0).seconds);
}

TEST(DeviceProfile, TruncatedCorruptAndForeignProfilesAreRefused) {
  const std::string text = device_profile_yaml(synthetic_profile());
  // Cut short (no closing `end: true`).
  const Loaded<DeviceProfile> cut = parse_device_profile_yaml(text.substr(0, text.size() / 2), "dev.yaml");
  EXPECT_FALSE(cut.ok());
  EXPECT_NE(cut.diagnostics.to_string().find("truncated"), std::string::npos) << cut.diagnostics.to_string();
  // A corrupt number names the file, the line and the field.
  std::string bad = text;
  bad.replace(bad.find("gemm_peak_gflops: ") + 18, 3, "abc");
  const Loaded<DeviceProfile> corrupt = parse_device_profile_yaml(bad, "dev.yaml");
  EXPECT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.diagnostics.to_string().find("dev.yaml:"), std::string::npos);
  EXPECT_NE(corrupt.diagnostics.to_string().find("gemm_peak_gflops"), std::string::npos)
      << corrupt.diagnostics.to_string();
  // Not a profile at all.
  EXPECT_FALSE(parse_device_profile_yaml("name: gpt\nlayers: 2\n", "m.yaml").ok());
  // Another device, another model shape.
  const DeviceProfile p = synthetic_profile();
  const ClusterSpec p5 = *load_cluster("p5.48xlarge").value;
  const ClusterSpec p4d = *load_cluster("p4d.24xlarge").value;
  const std::string dev = device_profile_mismatch(p, *load_model("gpt3-13b").value, p5, "dev.yaml");
  EXPECT_NE(dev.find("another device"), std::string::npos) << dev;
  EXPECT_NE(dev.find("H100"), std::string::npos) << dev;
  const std::string shape = device_profile_mismatch(p, *load_model("gpt3-175b").value, p4d, "dev.yaml");
  EXPECT_NE(shape.find("another model shape"), std::string::npos) << shape;
  EXPECT_EQ(device_profile_mismatch(p, *load_model("gpt3-13b").value, p4d, "dev.yaml"), "");
  // The same hidden, heads and FFN with heads of another size: another shape (its projections and
  // attention kernels are other GEMMs), said with both head sizes.
  ModelSpec wide_heads = *load_model("gpt3-13b").value;
  wide_heads.head_dim = 2 * wide_heads.head_dim_or_default();
  const std::string heads = device_profile_mismatch(p, wide_heads, p4d, "dev.yaml");
  EXPECT_NE(heads.find("another model shape"), std::string::npos) << heads;
  EXPECT_NE(heads.find("of " + std::to_string(wide_heads.head_dim)), std::string::npos) << heads;
  // The same shape with latent attention: capplan-train measures no latent projections.
  ModelSpec latent = *load_model("gpt3-13b").value;
  latent.mla = {0, 512, 128, 64, 128};
  const std::string mla = device_profile_mismatch(p, latent, p4d, "dev.yaml");
  EXPECT_NE(mla.find("multi-head latent attention (mla.kv_lora_rank 512)"), std::string::npos) << mla;
  // A profile that names its head size round-trips it.
  DeviceProfile named = p;
  named.head_dim = wide_heads.head_dim;
  const auto back = parse_device_profile_yaml(device_profile_yaml(named), "named.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_EQ(back.value->head_dim, wide_heads.head_dim);
  EXPECT_EQ(device_profile_mismatch(*back.value, wide_heads, p4d, "named.yaml"), "");
}

// GPT-3 13B on one p4d.24xlarge node, gbs 8: the scenario the synthetic profile stands for.
Scenario gpt3_13b_on_a_node() {
  Scenario sc;
  sc.model = *load_model("gpt3-13b").value;
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  sc.nodes = 1;
  sc.training.gbs = 8;
  return sc;
}

TEST(DeviceProfile, CostModelUsesMeasuredShapesAndTheFittedLine) {
  const Scenario sc = gpt3_13b_on_a_node();
  DeviceProfile p = synthetic_profile();
  p.gemms[0].seconds *= 3;  // one measured shape far off the line
  Scenario with = sc;
  with.cluster.device_profile = std::make_shared<const DeviceProfile>(p);
  const GemmTiming& g = p.gemms[0];
  EXPECT_DOUBLE_EQ(gemm_time_s(with, double(g.m), double(g.n), double(g.k)), g.seconds);
  // Two timings of one shape (a forward and a weight gradient with tok = in): their mean.
  DeviceProfile twice = p;
  GemmTiming again = g;
  again.seconds = 3 * g.seconds;
  twice.gemms.push_back(again);
  EXPECT_DOUBLE_EQ(twice.gemm_seconds(double(g.m), double(g.n), double(g.k)), 2 * g.seconds);
  // An unmeasured shape: the fitted line.
  const double m = 2048, n = 2048, k = 2048;
  EXPECT_NEAR(gemm_time_s(with, m, n, k), p.gemm_overhead_us * 1e-6 + 2 * m * n * k / (p.gemm_peak_gflops * 1e9),
              1e-12);
  EXPECT_NEAR(memory_time_s(with, 1e9), 1e9 / (p.memory_gbyte_per_s * 1e9), 1e-12);
  // A slower device makes the step slower: at half the GEMM rate the compute term grows.
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  const double fast = estimate(with, l).breakdown_s.compute;
  DeviceProfile slow = p;
  slow.gemm_peak_gflops /= 2;
  for (GemmTiming& t : slow.gemms) t.seconds *= 2;
  Scenario with_slow = sc;
  with_slow.cluster.device_profile = std::make_shared<const DeviceProfile>(slow);
  const double slower = estimate(with_slow, l).breakdown_s.compute;
  std::printf("Expectation: compute grows toward 2x at half the GEMM rate  Actual: %.3f s -> %.3f s\n", fast, slower);
  EXPECT_GT(slower, 1.5 * fast);
  EXPECT_LT(slower, 2.0 * fast);
}

// The synthetic profile as CPU ranks measured it: `ranks` ranks on a host of `cores` cores.
// capplan-train's ZeRO-0 moves each rank's reduced shard to its block before the all-gather, and
// the group's first rank waits for it there: a shard of the gradients (pp 1: all of the rank's)
// read and written at the profile's memory-bound bandwidth, times `stretch` where the exchange was
// timed among ranks sharing the cores (their copy stretch).
double shard_move_s(const Estimate& e, const DeviceProfile& p, int dp, double stretch = 1) {
  return 2.0 * e.memory_per_gpu_bytes.gradients / dp / (p.memory_gbyte_per_s * 1e9) * stretch;
}

DeviceProfile cpu_profile(int ranks, int cores) {
  DeviceProfile p = synthetic_profile();
  p.device = "cpu: test host, " + std::to_string(cores) + " cores";
  p.gpu = "cpu-rank";
  p.backend = "cpu";
  p.ranks = ranks;
  p.cores = cores;
  p.threads = 1;  // a backend thread each (capplan-train measure --threads 1)
  return p;
}

Scenario host_scenario(int ranks_on_host, const DeviceProfile& p) {
  Scenario sc = gpt3_13b_on_a_node();
  sc.cluster.gpus_per_node = ranks_on_host;
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(p);
  return sc;
}

// `yaml`, a profile with one value made bad, is refused with a message naming `field`.
void expect_refused_naming(const std::string& yaml, const std::string& field) {
  const Loaded<DeviceProfile> r = parse_device_profile_yaml(yaml, "bad.yaml");
  EXPECT_FALSE(r.ok()) << field;
  EXPECT_NE(r.diagnostics.to_string().find(field), std::string::npos) << r.diagnostics.to_string();
}

// `yaml` without its line that starts with `line_start`: a profile written before that field.
std::string without_line(std::string yaml, const std::string& line_start) {
  const size_t at = yaml.find(line_start);
  EXPECT_NE(at, std::string::npos) << line_start;
  if (at != std::string::npos) yaml.erase(at, yaml.find('\n', at) - at + 1);
  return yaml;
}

// `yaml` with each of `values` in turn after `key` (to the next comma; the first `key` at or after
// `from`) is refused with a message naming `field`.
void expect_values_refused(const std::string& yaml, const std::string& key, std::initializer_list<const char*> values,
                           const std::string& field, size_t from = 0) {
  const size_t at = yaml.find(key, from);
  ASSERT_NE(at, std::string::npos) << key;
  const size_t v = at + key.size();
  for (const char* value : values) {
    std::string bad = yaml;
    bad.replace(v, bad.find(',', v) - v, value);
    expect_refused_naming(bad, field);
  }
}

// The GEMMs within a step's compute and recompute (Estimate::gemm_s, set beside a run's measured
// `gemm` phase) are the linear layers' and the LM head's GEMMs at the profile's times, by hand:
// per layer and micro-batch the four forward GEMMs [tok, out] x [in], their input gradients
// [tok, in] over out and weight gradients [in, out] over tok; the head's [tok, V] over h, [tok, h]
// over V and [h, V] over tok. A full recompute runs the layer's forward GEMMs again; the attention
// core is no GEMM of the backend's. 40 layers of gpt3-13b, one micro-batch of 2048 tokens.
TEST(DeviceProfile, TheStepsGemmsAreTheLinearLayersAndTheHeadsAtTheProfilesTimes) {
  Scenario sc = gpt3_13b_on_a_node();
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(synthetic_profile());
  const double tok = 2048, h = 5120, f = 20480, V = 50257;
  auto g = [&](double m, double n, double k) { return gemm_time_s(sc, m, n, k); };
  const double fwd = g(tok, 3 * h, h) + g(tok, h, h) + g(tok, f, h) + g(tok, h, f);
  const double bwd = g(tok, h, 3 * h) + g(tok, h, h) + g(tok, h, f) + g(tok, f, h) +  //
                     g(h, 3 * h, tok) + g(h, h, tok) + g(h, f, tok) + g(f, h, tok);
  const double head = g(tok, V, h) + g(tok, h, V) + g(h, V, tok);
  Layout l;
  l.dp = 8;
  l.mbs = 1;
  const Estimate plain = estimate(sc, l);
  const double expected = 40 * (fwd + bwd) + head;
  std::printf("Expectation: GEMMs %.6f s of compute %.6f s  Actual: %.6f s\n", expected, plain.breakdown_s.compute,
              plain.gemm_s);
  EXPECT_NEAR(plain.gemm_s, expected, 1e-9 * expected);
  EXPECT_LT(plain.gemm_s, plain.breakdown_s.compute);
  l.recompute = Recompute::Full;
  EXPECT_NEAR(estimate(sc, l).gemm_s, expected + 40 * fwd, 1e-9 * expected);
  l.recompute = Recompute::Selective;
  EXPECT_NEAR(estimate(sc, l).gemm_s, expected, 1e-9 * expected);
  // Four ranks on two cores: the GEMMs stretch as the passes they are part of.
  Layout four;
  four.dp = 4;
  four.mbs = 1;
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), four);
  const Estimate shared = estimate(host_scenario(4, cpu_profile(2, 2)), four);
  const double stretch = (shared.breakdown_s.compute + shared.breakdown_s.recompute) /
                         (own.breakdown_s.compute + own.breakdown_s.recompute);
  ASSERT_GT(stretch, 1.5);
  EXPECT_NEAR(shared.gemm_s, own.gemm_s * stretch, 1e-12 * shared.gemm_s);
}

TEST(DeviceProfile, CoresReadBackAndOldProfilesHaveNone) {
  const DeviceProfile p = cpu_profile(2, 2);
  const std::string text = device_profile_yaml(p);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(text, "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->cores, 2);
  const Loaded<DeviceProfile> r = parse_device_profile_yaml(without_line(text, "  cores:"), "old.yaml");
  ASSERT_TRUE(r.ok()) << r.diagnostics.to_string();
  EXPECT_EQ(r.value->cores, 0);
}

// Processor sharing (cost_model_cores.cpp): 4 data-parallel ranks on a host of 2 cores, every
// rank busy all the time, each runs at half a core, so the step's busy time doubles, and so does
// the gradient all-reduce, whose copies and sums the ranks run on the same cores at once. The
// optimizer step keeps its dedicated time (the ranks enter it one ring step apart) and the compute
// takes its share of the stretch: compute' = 2 compute + optimizer.
TEST(DeviceProfile, FourRanksOnTwoCoresDoubleTheBusyTerms) {
  Layout l;
  l.dp = 4;
  l.mbs = 1;
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), l);  // a core each
  const Estimate shared = estimate(host_scenario(4, cpu_profile(2, 2)), l);
  const TimeBreakdown& a = own.breakdown_s;
  const TimeBreakdown& b = shared.breakdown_s;
  const double expected = own.step_time_s + a.compute + a.recompute + a.optimizer + a.dp_comm;
  std::printf("Expectation: step %.6f s (compute %.6f x 2) Actual result: %.6f s (compute %.6f)\n", expected,
              a.compute, shared.step_time_s, b.compute);
  ASSERT_GT(a.optimizer, 0);
  EXPECT_NEAR(b.compute, 2 * a.compute + a.optimizer, 1e-12 * a.compute);
  EXPECT_NEAR(b.optimizer, a.optimizer, 1e-12 * a.optimizer);
  ASSERT_GT(a.dp_comm, 0);
  EXPECT_NEAR(b.dp_comm, 2 * a.dp_comm, 1e-12 * a.dp_comm);
  EXPECT_NEAR(shared.step_time_s, expected, 1e-12 * expected);
  // Two ranks as the profile's two, on 2 cores or on 4 (measured, and run, with 2 threads each):
  // no sharing, the dedicated step.
  Layout two = l;
  two.dp = 2;
  DeviceProfile four_cores = cpu_profile(2, 4);
  four_cores.threads = 2;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(2, cpu_profile(2, 2)), two).step_time_s,
                   estimate(host_scenario(2, four_cores), two).step_time_s);
  // A GPU profile is one rank's device: cores play no part.
  DeviceProfile gpu = synthetic_profile();
  gpu.cores = 2;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(4, gpu), l).step_time_s,
                   estimate(host_scenario(4, synthetic_profile()), l).step_time_s);
  // A profile measured with 4 ranks on the 2 cores holds times already stretched 2x: with 4 ranks
  // again they are what the run gets.
  const Estimate again = estimate(host_scenario(4, cpu_profile(4, 2)), l);
  EXPECT_NEAR(again.step_time_s, own.step_time_s, 1e-12 * own.step_time_s);
}

// capplan-train gives each rank the host's cores over the ranks as backend threads, and a rank's
// compute scales with them (measured: 1 rank on 2 cores 1.96-2.06x the profile's ranks with a
// thread each). Expectation: one rank on the 2 cores of a profile of two single-thread ranks
// computes in half their time; 8 ranks on 16 cores (2 threads each) against a profile of 2 ranks
// with 8 threads each, in 4x. Copies and collectives do not scale. Where the ranks outnumber the
// cores they have a thread each: 4 ranks on 2 cores against the same profile, as before.
TEST(DeviceProfile, ARanksComputeScalesWithItsBackendThreads) {
  Layout one;
  one.mbs = 1;
  Scenario single = host_scenario(1, cpu_profile(2, 2));
  single.cluster.gpu.memory_gib = 4096;  // the whole 13B model on one rank fits
  DeviceProfile two_threads = cpu_profile(2, 2);
  two_threads.threads = 2;  // as if measured with the rank's two threads
  const Estimate faster = estimate(single, one);
  single.cluster.device_profile = std::make_shared<const DeviceProfile>(two_threads);
  const Estimate as_measured = estimate(single, one);
  ASSERT_TRUE(faster.reason.empty()) << faster.reason;
  std::printf("Expectation: compute %.6f s / 2 = %.6f s  Actual result: %.6f s\n", as_measured.breakdown_s.compute,
              as_measured.breakdown_s.compute / 2, faster.breakdown_s.compute);
  EXPECT_NEAR(faster.breakdown_s.compute, as_measured.breakdown_s.compute / 2, 1e-12 * as_measured.breakdown_s.compute);
  EXPECT_NEAR(faster.breakdown_s.optimizer, as_measured.breakdown_s.optimizer / 2, 1e-12 * as_measured.breakdown_s.optimizer);
  // Eight data-parallel ranks on 16 cores, 2 threads each, against 2 ranks of 8 threads: 4x the
  // compute of the same profile read as 2-thread ranks; the gradient exchange the same.
  Layout dp8;
  dp8.dp = 8;
  dp8.mbs = 1;
  DeviceProfile wide = cpu_profile(2, 16);
  wide.threads = 8;
  DeviceProfile wide_as_run = wide;
  wide_as_run.threads = 2;
  const Estimate slower = estimate(host_scenario(8, wide), dp8);
  const Estimate same = estimate(host_scenario(8, wide_as_run), dp8);
  EXPECT_NEAR(slower.breakdown_s.compute, 4 * same.breakdown_s.compute, 1e-12 * slower.breakdown_s.compute);
  EXPECT_DOUBLE_EQ(slower.breakdown_s.dp_comm, same.breakdown_s.dp_comm);
  // A profile that does not record its threads had the cores over its ranks: 16 / 2 = 8.
  DeviceProfile unrecorded = wide;
  unrecorded.threads = 0;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(8, unrecorded), dp8).step_time_s, slower.step_time_s);
  // The search prices a layout as the estimate does.
  SearchOptions o;
  o.nodes_min = o.nodes_max = 1;
  o.gpus = 1;
  o.top = 50;
  single.cluster.device_profile = std::make_shared<const DeviceProfile>(cpu_profile(2, 2));
  const SearchResult r = search(single, o);
  bool found = false;
  for (const Estimate& e : r.candidates)
    if (e.layout.dp == 1 && e.layout.tp == 1 && e.layout.pp == 1 && e.layout.mbs == 1 && e.layout.zero == 0 &&
        e.layout.recompute == Recompute::None && !e.layout.offload) {
      found = true;
      EXPECT_NEAR(e.step_time_s, faster.step_time_s, 1e-9 * faster.step_time_s);
    }
  EXPECT_TRUE(found);
}

// capplan-train splits each micro-batch of a CPU rank with several threads into parts that run
// side by side, a part's threads each (--thread-split auto), so the parts' GEMMs have the part's
// rows. Expectation: one rank of two threads at mbs 2 computes as two ranks of one thread at mbs 1
// over the same batch, and more than two such ranks at mbs 2 (twice the GEMMs, each with its
// fixed cost); at mbs 3 the micro-batch does not divide, the threads split every kernel, and the
// rank computes as two one-thread ranks at mbs 3. The search prices the split as the estimate does.
TEST(DeviceProfile, ASplitMicroBatchComputesAsItsPartsSideBySide) {
  const DeviceProfile p = cpu_profile(2, 2);
  Scenario single = host_scenario(1, p), pair = host_scenario(2, p);
  single.cluster.gpu.memory_gib = pair.cluster.gpu.memory_gib = 4096;
  Layout two, dp2_one, dp2_two;
  two.mbs = 2;
  dp2_one.dp = dp2_two.dp = 2;
  dp2_one.mbs = 1;
  dp2_two.mbs = 2;
  const Estimate split = estimate(single, two);
  const Estimate parts = estimate(pair, dp2_one), whole = estimate(pair, dp2_two);
  ASSERT_TRUE(split.reason.empty()) << split.reason;
  std::printf("Expectation: compute as two ranks at mbs 1, %.6f s, more than at mbs 2, %.6f s  Actual: %.6f s\n",
              parts.breakdown_s.compute, whole.breakdown_s.compute, split.breakdown_s.compute);
  EXPECT_NEAR(split.breakdown_s.compute, parts.breakdown_s.compute, 1e-12 * parts.breakdown_s.compute);
  EXPECT_GT(split.breakdown_s.compute, whole.breakdown_s.compute * (1 + 1e-6));
  single.training.gbs = pair.training.gbs = 12;
  Layout three = two, dp2_three = dp2_two;
  three.mbs = dp2_three.mbs = 3;
  EXPECT_NEAR(estimate(single, three).breakdown_s.compute, estimate(pair, dp2_three).breakdown_s.compute,
              1e-12 * parts.breakdown_s.compute);
  single.training.gbs = 8;
  SearchOptions o;
  o.nodes_min = o.nodes_max = 1;
  o.gpus = 1;
  o.top = 50;
  bool found = false;
  for (const Estimate& e : search(single, o).candidates)
    if (e.layout.dp == 1 && e.layout.tp == 1 && e.layout.pp == 1 && e.layout.mbs == 2 && e.layout.zero == 0 &&
        e.layout.recompute == Recompute::None && !e.layout.offload) {
      found = true;
      EXPECT_NEAR(e.step_time_s, split.step_time_s, 1e-9 * split.step_time_s);
    }
  EXPECT_TRUE(found);
}

// Where the profile timed the gradient exchange among as many ranks on the shared cores, in
// groups of the dp group's size (shared_cores[].exchange), dp_comm is that time, the host's
// already, not the 2-rank exchange stretched by the core share: dp 4 on 4 ranks of 2 cores takes
// the groups of 4's time, dp 2 x tp 2 the pairs', and the step moves by the difference. A host of
// another number of ranks, or a group size not timed, keeps the stretched exchange. The form reads
// back, and a bad timing is refused naming its field.
TEST(DeviceProfile, ExchangeTimedOnTheSharedCoresIsTheHostsTime) {
  DeviceProfile p = cpu_profile(2, 2);
  SharedCoresTiming four{4, 1, 0.001, {{2, 262144, 0.0002, 0, ""}, {4, 262144, 0.0003, 0, ""}}, "four", 0, {}};
  // Pairs: 1 ms + 1 ms per GB; groups of 4: a flat 1.23 s over the whole range.
  four.exchange = {{2, 1e3, 0.001 + 1e3 * 1e-12}, {2, 1e12, 0.001 + 1e12 * 1e-12}, {4, 1e3, 1.23}, {4, 1e12, 1.23}};
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(cpu_profile(2, 2)), "dev.yaml");
  ASSERT_TRUE(q.ok());
  DeviceProfile timed = *q.value;
  timed.shared = {four};
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(timed), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  const DeviceProfile& d = *back.value;
  ASSERT_EQ(d.shared.size(), 1u);
  ASSERT_EQ(d.shared[0].exchange.size(), 4u);
  EXPECT_NEAR(d.shared_exchange_s(4, 2, 5e8), 0.001 + 5e8 * 1e-12, 1e-12);
  EXPECT_NEAR(d.shared_exchange_s(4, 4, 5e8), 1.23, 1e-12);
  EXPECT_LT(d.shared_exchange_s(8, 4, 5e8), 0);  // not measured with 8 ranks
  EXPECT_LT(d.shared_exchange_s(4, 8, 5e8), 0);  // nor for groups of 8
  EXPECT_LT(cpu_profile(2, 2).shared_exchange_s(4, 4, 5e8), 0);

  Layout dp4;
  dp4.dp = 4;
  dp4.mbs = 1;
  p.shared = {four};
  p.shared[0].exchange.clear();
  const Estimate stretched = estimate(host_scenario(4, p), dp4);
  const Estimate own = estimate(host_scenario(4, d), dp4);
  std::printf("Expectation: dp 4's dp_comm 1.23 s as timed (stretched from 2 ranks' %.4f s). Actual result: "
              "%.4f s; step %.4f -> %.4f s\n", stretched.breakdown_s.dp_comm, own.breakdown_s.dp_comm,
              stretched.step_time_s, own.step_time_s);
  // (and ZeRO-0's shard move at the shared cores' copy stretch, 4 ranks on 2 cores: 2)
  EXPECT_NEAR(own.breakdown_s.dp_comm - shard_move_s(own, d, 4, 2), 1.23, 1e-12);
  EXPECT_NEAR(own.step_time_s - stretched.step_time_s, own.breakdown_s.dp_comm - stretched.breakdown_s.dp_comm,
              1e-9 * own.step_time_s);
  // The simulator replays the timed exchange as it is, without the core share's stretch.
  const double sim_own = simulate_step(host_scenario(4, d), dp4).step_time_s;
  const double sim_stretched = simulate_step(host_scenario(4, p), dp4).step_time_s;
  std::printf("Expectation: simulated steps %.4f and %.4f s. Actual result: %.4f and %.4f s\n", own.step_time_s,
              stretched.step_time_s, sim_own, sim_stretched);
  EXPECT_NEAR(sim_stretched - sim_own, stretched.step_time_s - own.step_time_s, 0.01 * own.step_time_s);
  // dp 2 x tp 2: the pairs' time for the rank's half of the gradients.
  Layout dp2tp2 = dp4;
  dp2tp2.dp = 2;
  dp2tp2.tp = 2;
  const Estimate pairs = estimate(host_scenario(4, d), dp2tp2);
  const double half_grads = (pairs.breakdown_s.dp_comm - shard_move_s(pairs, d, 2, 2) - 0.001) / 1e-12;
  std::printf("Expectation: dp 2 x tp 2 at the pairs' line, about half of the model's gradients. Actual result: "
              "%.4f s, %.3g bytes\n", pairs.breakdown_s.dp_comm, half_grads);
  EXPECT_GT(half_grads, 0.45 * 4 * 13e9);  // fp32 gradients of GPT-3 13B's half
  EXPECT_LT(half_grads, 0.55 * 4 * 13e9);
  // Eight ranks on the host: not measured, the stretched 2-rank exchange.
  Layout dp8 = dp4;
  dp8.dp = 8;
  DeviceProfile none = d;
  none.shared[0].exchange.clear();
  EXPECT_DOUBLE_EQ(estimate(host_scenario(8, d), dp8).breakdown_s.dp_comm,
                   estimate(host_scenario(8, none), dp8).breakdown_s.dp_comm);

  std::string text = device_profile_yaml(d);
  text.replace(text.find("seconds: 1.23"), 13, "seconds: -1");
  expect_refused_naming(text, "shared_cores[0].exchange[2].seconds");
  text = device_profile_yaml(d);
  text.replace(text.find("{group: 2, bytes"), 9, "{group: 1");
  expect_refused_naming(text, "shared_cores[0].exchange[0].group");
}

// The gradient exchange made right after compute, as capplan-train makes it after a step's
// backward, takes the profile's measured ratio of that exchange (lockstep gradient_exchange) to
// the same exchange timed on its own: with a core each the 2-rank cold "gradient-exchange"
// collective, on shared cores the shared-cores exchange of that group. A ratio below 1 is taken as
// 1; a profile without it keeps the exchange as timed.
TEST(DeviceProfile, ExchangeRightAfterComputeTakesTheMeasuredRatio) {
  // A core each: the exchange of 2 ranks, 1 ms + 1 ms per GB, 1.3x that right after compute at 16 MiB.
  DeviceProfile two = cpu_profile(2, 2);
  for (double bytes : {1e3, 1e12}) two.collectives.push_back({"gradient-exchange", 2, bytes, 0.001 + bytes * 1e-12, true});
  two.lockstep.allreduce_bytes = 262144;  // the lockstep's own measurement, which the exchange's goes with
  two.lockstep.allreduce_s = 0.0002;
  const double gx = 16 * 1048576.0;
  const double own = two.collective_seconds("gradient-exchange", 2, gx, true);
  ASSERT_NEAR(own, 0.001 + gx * 1e-12, 1e-15);
  DeviceProfile after = two;
  after.lockstep.gradient_exchange_bytes = gx;
  after.lockstep.gradient_exchange_s = 1.3 * own;
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(after), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(back.value->lockstep.gradient_exchange_bytes, gx);
  EXPECT_NEAR(back.value->exchange_after_compute(2, 2), 1.3, 1e-12);
  EXPECT_DOUBLE_EQ(two.exchange_after_compute(2, 2), 1.0);  // not measured
  DeviceProfile faster = after;
  faster.lockstep.gradient_exchange_s = 0.7 * own;
  EXPECT_DOUBLE_EQ(faster.exchange_after_compute(2, 2), 1.0);
  Layout dp2;
  dp2.dp = 2;
  dp2.mbs = 1;
  // (each less ZeRO-0's shard move, the same in both)
  const Estimate alone_e = estimate(host_scenario(2, two), dp2);
  const double alone = alone_e.breakdown_s.dp_comm - shard_move_s(alone_e, two, 2);
  const double right_after = estimate(host_scenario(2, *back.value), dp2).breakdown_s.dp_comm - shard_move_s(alone_e, two, 2);
  std::printf("Expectation: dp 2's exchange 1.3x its time alone. Actual result: %.5f -> %.5f s (x%.4f)\n", alone,
              right_after, right_after / alone);
  EXPECT_GT(alone, 0);
  EXPECT_NEAR(right_after / alone, 1.3, 1e-9);
  // ZeRO-1 makes the same three calls: the same ratio, where the lockstep did not time its own.
  Layout zero1 = dp2;
  zero1.zero = 1;
  Scenario fp32 = host_scenario(2, two);
  fp32.training.precision = Precision::Fp32;
  Scenario fp32_after = host_scenario(2, *back.value);
  fp32_after.training.precision = Precision::Fp32;
  const double z1_alone = estimate(fp32, zero1).breakdown_s.dp_comm;
  EXPECT_NEAR(estimate(fp32_after, zero1).breakdown_s.dp_comm / z1_alone, 1.3, 1e-9);
  // Where it did (its all-gather after AdamW's sweep, 1.5x the exchange alone), ZeRO-1 takes that
  // ratio and ZeRO-0 keeps its own; written and read back with the profile.
  DeviceProfile z1_timed = after;
  z1_timed.lockstep.zero1_exchange_s = 1.5 * own;
  const Loaded<DeviceProfile> z1_back = parse_device_profile_yaml(device_profile_yaml(z1_timed), "dev.yaml");
  ASSERT_TRUE(z1_back.ok()) << z1_back.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(z1_back.value->lockstep.zero1_exchange_s, 1.5 * own);
  EXPECT_NEAR(z1_back.value->exchange_after_compute(2, 2, true), 1.5, 1e-12);
  EXPECT_NEAR(z1_back.value->exchange_after_compute(2, 2), 1.3, 1e-12);
  Scenario fp32_z1 = host_scenario(2, *z1_back.value);
  fp32_z1.training.precision = Precision::Fp32;
  const double z1_timed_s = estimate(fp32_z1, zero1).breakdown_s.dp_comm;
  std::printf("Expectation: ZeRO-1's exchange 1.5x its time alone. Actual result: %.5f -> %.5f s (x%.4f)\n", z1_alone,
              z1_timed_s, z1_timed_s / z1_alone);
  EXPECT_NEAR(z1_timed_s / z1_alone, 1.5, 1e-9);
  EXPECT_NEAR(estimate(host_scenario(2, *z1_back.value), dp2).breakdown_s.dp_comm - shard_move_s(alone_e, two, 2),
              right_after, 1e-12);
  // Bad input: ZeRO-1's time without the exchange's bytes, or not positive.
  std::string z1_yaml = device_profile_yaml(z1_timed);
  expect_values_refused(z1_yaml, "zero1_exchange_seconds: ", {"0", "-1", "nan"}, "zero1_exchange_seconds");
  const size_t bytes_at = z1_yaml.find("gradient_exchange_bytes: "), z1_at = z1_yaml.find("zero1_exchange_seconds: ");
  ASSERT_LT(bytes_at, z1_at) << z1_yaml;
  z1_yaml.erase(bytes_at, z1_at - bytes_at);
  expect_refused_naming(z1_yaml, "gradient_exchange_bytes");

  // Shared cores: 4 ranks on 2, groups of 4 exchange in a flat 1.23 s alone and 1.5 s right after
  // compute; pairs faster right after compute (taken as 1).
  DeviceProfile shared = cpu_profile(2, 2);
  SharedCoresTiming four{4, 1, 0.001, {{2, 262144, 0.0002, 0, ""}, {4, 262144, 0.0003, 0, ""}}, "four", 0, {}};
  four.exchange = {{2, 1e3, 0.001 + 1e3 * 1e-12}, {2, 1e12, 0.001 + 1e12 * 1e-12}, {4, 1e3, 1.23}, {4, 1e12, 1.23}};
  four.lockstep[0].gradient_exchange_bytes = gx;
  four.lockstep[0].gradient_exchange_s = 0.9 * (0.001 + gx * 1e-12);
  four.lockstep[1].gradient_exchange_bytes = gx;
  four.lockstep[1].gradient_exchange_s = 1.5;
  shared.shared = {four};
  const Loaded<DeviceProfile> sb = parse_device_profile_yaml(device_profile_yaml(shared), "dev.yaml");
  ASSERT_TRUE(sb.ok()) << sb.diagnostics.to_string();
  const DeviceProfile& d = *sb.value;
  EXPECT_NEAR(d.exchange_after_compute(4, 4), 1.5 / 1.23, 1e-12);
  EXPECT_DOUBLE_EQ(d.exchange_after_compute(4, 2), 1.0);
  EXPECT_DOUBLE_EQ(d.exchange_after_compute(8, 4), 1.0);  // 8 ranks not measured
  Layout dp4 = dp2;
  dp4.dp = 4;
  const Estimate e = estimate(host_scenario(4, d), dp4);
  std::printf("Expectation: dp 4's exchange on the shared cores 1.5 s, as timed right after compute. Actual "
              "result: %.4f s\n", e.breakdown_s.dp_comm);
  EXPECT_NEAR(e.breakdown_s.dp_comm - shard_move_s(e, d, 4, 2), 1.5, 1e-9);

  // Bad input: one of the pair without the other, or a time that is not positive.
  std::string text = device_profile_yaml(after);
  const std::string key = ", gradient_exchange_seconds: ";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  expect_refused_naming(text.substr(0, at) + text.substr(text.find(",", at + 1)), "lockstep.gradient_exchange_seconds");
  expect_refused_naming(text.substr(0, at) + key + "-1" + text.substr(text.find(",", at + 1)),
                        "lockstep.gradient_exchange_seconds");
  text = device_profile_yaml(shared);
  text.replace(text.find("gradient_exchange_bytes: "), 25, "gradient_exchange_bytes: -");
  expect_refused_naming(text, "shared_cores[0].lockstep[0].gradient_exchange_bytes");
}

// Ranks side by side reach the measured fraction of the processor-sharing ideal (the profile's
// free_efficiency, against its ranks with a core each): dp 4 on 2 cores at 0.8 of it does the
// host's work 1 / 0.8 slower, T = W / (2 x 0.8) + X, and the simulator's shared cores do the
// same; ranks that do not outnumber the cores keep the dedicated step; measurements at 4 and 8
// ranks are interpolated between.
TEST(DeviceProfile, RanksSideBySideDoTheMeasuredFractionOfTheIdeal) {
  Layout l;
  l.dp = 4;
  l.mbs = 1;
  const DeviceProfile ideal = cpu_profile(2, 2);
  DeviceProfile measured = ideal;
  measured.shared = {{4, 0.8, 0, {}, "four"}, {8, 0.6, 0, {}, "eight"}};
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(measured), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(back.value->shared_free_efficiency(4), 0.8);
  EXPECT_DOUBLE_EQ(back.value->shared_free_efficiency(6), 0.7);
  EXPECT_DOUBLE_EQ(back.value->shared_free_efficiency(16), 0.6);
  EXPECT_LT(ideal.shared_free_efficiency(4), 0);  // not measured
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), l);  // a core each
  const Estimate full = estimate(host_scenario(4, ideal), l);
  const Estimate part = estimate(host_scenario(4, *back.value), l);
  const TimeBreakdown& a = own.breakdown_s;
  const double work = 2 * (a.compute + a.optimizer);  // the host's work over its 2 cores
  const double expected = full.step_time_s + work * (1 / 0.8 - 1);
  std::printf("Expectation: step %.6f s at 0.8 of the ideal (%.6f at the ideal) Actual result: %.6f s\n", expected,
              full.step_time_s, part.step_time_s);
  EXPECT_NEAR(part.step_time_s, expected, 1e-9 * expected);
  EXPECT_NEAR(part.breakdown_s.compute, work / 0.8 - a.optimizer, 1e-9 * expected);
  EXPECT_NEAR(part.breakdown_s.optimizer, a.optimizer, 1e-12 * a.optimizer);
  // The simulator's cores: the same step, within its own rounding of the collectives.
  const double sim_full = simulate_step(host_scenario(4, ideal), l).step_time_s;
  const double sim_part = simulate_step(host_scenario(4, *back.value), l).step_time_s;
  std::printf("Expectation: simulated %.6f s Actual result: %.6f s (%.6f at the ideal)\n", part.step_time_s, sim_part,
              sim_full);
  EXPECT_NEAR(sim_part - sim_full, part.step_time_s - full.step_time_s, 0.01 * part.step_time_s);
  // Two ranks on the two cores share nothing.
  Layout two = l;
  two.dp = 2;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(2, *back.value), two).step_time_s,
                   estimate(host_scenario(2, ideal), two).step_time_s);
}

// The host's ranks take their optimizer steps at once (right after the collective before them), and
// how the cores share them right after the gradient exchange is measured (SharedCoresTiming's
// optimizer_s over optimizer_alone_s). Expectation: dp 4 on 2 cores with a stretch of 1.6 measured
// at 4 ranks: the optimizer takes 1.6 times its own time, the passes 2 x theirs plus the 0.4 of it
// the cores did not give the optimizer (the step is the host's work over the cores, unchanged);
// 2.7 at 8 ranks interpolates to 2.15 at 6; a stretch beyond the ranks' share of a core (3 for 4
// ranks on 2 cores) is held to it, 2. dp 2 x tp 2 (in lockstep) and dp 2 x pp 2, whose last
// collective before the step is the norm's sum over the tp or pp group, keep their dedicated
// time; so do layouts of a profile without it and two ranks on two cores. optimizer_bytes without
// its times, or a time of 0, is refused naming the field.
TEST(DeviceProfile, OptimizerStepsTakenAtOnceTakeTheMeasuredStretch) {
  Layout l;
  l.dp = 4;
  l.mbs = 1;
  const DeviceProfile plain = cpu_profile(2, 2);
  DeviceProfile measured = plain;
  measured.shared = {{4, 1.0, 0, {}, "four"}, {8, 1.0, 0, {}, "eight"}};
  measured.shared[0].optimizer_bytes = measured.shared[1].optimizer_bytes = 1e8;
  measured.shared[0].optimizer_s = 0.016;
  measured.shared[0].optimizer_alone_s = 0.01;
  measured.shared[1].optimizer_s = 0.027;
  measured.shared[1].optimizer_alone_s = 0.01;
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(measured), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(back.value->shared[1].optimizer_bytes, 1e8);
  EXPECT_NEAR(back.value->shared_optimizer_stretch(4), 1.6, 1e-12);
  EXPECT_NEAR(back.value->shared_optimizer_stretch(6), 2.15, 1e-12);
  EXPECT_LT(plain.shared_optimizer_stretch(4), 0);  // not measured
  const Estimate own = estimate(host_scenario(4, plain), l);
  const Estimate part = estimate(host_scenario(4, *back.value), l);
  const TimeBreakdown& a = own.breakdown_s;
  const TimeBreakdown& b = part.breakdown_s;
  const double opt = estimate(host_scenario(4, cpu_profile(2, 4)), l).breakdown_s.optimizer;  // a core each
  std::printf("Expectation: optimizer %.6f s (x1.6), compute %.6f s Actual result: %.6f s, %.6f s\n", 1.6 * opt,
              a.compute - 0.6 * opt, b.optimizer, b.compute);
  ASSERT_GT(opt, 0);
  EXPECT_NEAR(a.optimizer, opt, 1e-12 * opt);
  EXPECT_NEAR(b.optimizer, 1.6 * opt, 1e-9 * opt);
  EXPECT_NEAR(b.compute, a.compute - 0.6 * opt, 1e-9 * a.compute);
  EXPECT_NEAR(part.step_time_s, own.step_time_s, 1e-12 * own.step_time_s);
  // Beyond the ranks' share of a core: held to it.
  DeviceProfile beyond = *back.value;
  beyond.shared[0].optimizer_s = 0.03;
  EXPECT_NEAR(estimate(host_scenario(4, beyond), l).breakdown_s.optimizer, 2 * opt, 1e-9 * opt);
  // The norm's sum over the tensor-parallel pair (in lockstep) or the two stages comes last: the
  // dedicated step.
  for (const auto& [tp, pp] : {std::pair{2, 1}, std::pair{1, 2}}) {
    Layout two_groups = l;
    two_groups.dp = 2;
    two_groups.tp = tp;
    two_groups.pp = pp;
    const double own_opt = estimate(host_scenario(4, cpu_profile(2, 4)), two_groups).breakdown_s.optimizer;
    ASSERT_GT(own_opt, 0);
    EXPECT_NEAR(estimate(host_scenario(4, *back.value), two_groups).breakdown_s.optimizer, own_opt, 1e-12 * own_opt)
        << tp << " x " << pp;
    EXPECT_NEAR(estimate(host_scenario(4, plain), two_groups).breakdown_s.optimizer, own_opt, 1e-12 * own_opt);
  }
  // Two ranks on two cores share nothing.
  Layout two = l;
  two.dp = 2;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(2, *back.value), two).breakdown_s.optimizer,
                   estimate(host_scenario(2, plain), two).breakdown_s.optimizer);
  // Bad or partial measurements.
  const std::string text = device_profile_yaml(measured);
  std::string no_times = text;
  const size_t at = no_times.find(", optimizer_seconds: ");
  no_times.erase(at, no_times.find(", how:", at) - at);
  expect_refused_naming(no_times, "optimizer_seconds");
  std::string zero = text;
  zero.replace(zero.find("optimizer_alone_seconds: ") + 25, 4, "0, x");
  expect_refused_naming(zero, "optimizer_alone_seconds");
}

// capplan-train's ZeRO-0 moves each rank's reduced shard from the start of the gradient buffer to
// its block between the reduce-scatter and the all-gather (Optimizer::update), and the group's
// first rank waits for it in the all-gather. Expectation: dp 2 of GPT-3 13B's gradients on a CPU
// profile: dp_comm shorter by half the move when the profile's memory-bound bandwidth doubles,
// the move being the shard (half the rank's gradients) read and written, 2 x G / 2 / bandwidth;
// ZeRO-1 (no move: its all-gather sends the updated weights where they are)
// unchanged.
TEST(DeviceProfile, ZeroZeroMovesItsShardBeforeTheAllGather) {
  const DeviceProfile slow = cpu_profile(2, 2);
  DeviceProfile fast = slow;
  fast.memory_gbyte_per_s *= 2;
  Layout dp2;
  dp2.dp = 2;
  dp2.mbs = 1;
  const Estimate a = estimate(host_scenario(2, slow), dp2);
  const Estimate b = estimate(host_scenario(2, fast), dp2);
  const double move = 2.0 * a.memory_per_gpu_bytes.gradients / 2 / (slow.memory_gbyte_per_s * 1e9);
  std::printf("Expectation: dp_comm %.6f s shorter (half the move of %.6f s) Actual result: %.6f s\n", move / 2, move,
              a.breakdown_s.dp_comm - b.breakdown_s.dp_comm);
  ASSERT_GT(move, 0);
  EXPECT_NEAR(a.breakdown_s.dp_comm - b.breakdown_s.dp_comm, move / 2, 1e-9 * move);
  Layout zero1 = dp2;
  zero1.zero = 1;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(2, slow), zero1).breakdown_s.dp_comm,
                   estimate(host_scenario(2, fast), zero1).breakdown_s.dp_comm);
}

// A pipeline's waiting stage gives its core away: 4 stages on 2 cores take the host's work over 2
// cores, T = max(T_d, W / 2 + X), W = m x every chunk's forward, backward and recompute + 4
// optimizer steps, X = the dedicated step's communication; less than stretching the whole
// dedicated step (bubble included) by 4 / 2.
TEST(DeviceProfile, PipelineBubbleGivesItsCoreAway) {
  Layout l;
  l.pp = 4;
  l.mbs = 1;
  const Scenario own_sc = host_scenario(4, cpu_profile(2, 4));
  const Estimate own = estimate(own_sc, l);
  const Estimate shared = estimate(host_scenario(4, cpu_profile(2, 2)), l);
  const TimeBreakdown& a = own.breakdown_s;
  const StepCosts costs = step_costs(own_sc, l);
  const double m = double(own.num_microbatches);
  double work = 4 * a.optimizer;
  for (const ChunkCosts& c : costs.chunks)
    work += m * (c.forward_s + c.backward_input_s + c.backward_weight_s + c.recompute_s);
  // The communication X: the pipeline's transfers and the embedding's exchange are copies by the
  // ranks, at 2 / 4 of a core here (their time doubled by 4 / 2). Of a transfer's, the receiving
  // rank's copy at a core's speed is pp_comm, the rest its wait, bubble; the exchange's is pp_comm.
  const double comm = own.step_time_s - a.compute - a.recompute - a.optimizer - a.bubble + a.pp_comm;
  const double sync = costs.embedding_sync_s;
  ASSERT_GT(sync, 0);
  EXPECT_NEAR(shared.breakdown_s.pp_comm, (a.pp_comm - sync) + 2 * sync, 1e-12);
  // The pipeline slot by slot: slot k runs stages 0 .. a_k - 1, a_k = min(k + 1, 4, m + 3 - k),
  // one rank each, under processor sharing on the 2 cores (the longest task of the slot ends it).
  std::vector<double> w;
  for (const ChunkCosts& c : costs.chunks)
    w.push_back(c.forward_s + c.backward_input_s + c.backward_weight_s + c.recompute_s);
  const int n = int(m) + 3;
  double slots = 0;
  for (int k = 0; k < n; ++k) {
    const int act = std::min({k + 1, 4, n - k});
    std::vector<double> v(w.begin(), w.begin() + act);
    std::sort(v.begin(), v.end());
    double prev = 0;
    for (int i = 0; i < act; ++i) {
      slots += (v[size_t(i)] - prev) * std::max(1.0, (act - i) / 2.0);
      prev = v[size_t(i)];
    }
  }
  const double expected = std::max({own.step_time_s, work / 2 + comm, slots + a.optimizer + comm});
  std::printf("Expectation: step max(%.4f, %.4f / 2 + %.4f, slots %.4f + %.4f) = %.4f s, below 2 x %.4f Actual "
              "result: %.4f s (bubble %.4f -> %.4f)\n",
              own.step_time_s, work, comm, slots, a.optimizer + comm, expected, own.step_time_s, shared.step_time_s,
              a.bubble, shared.breakdown_s.bubble);
  EXPECT_GT(slots + a.optimizer + comm, work / 2 + comm);  // the stages' uneven work leaves cores idle
  EXPECT_NEAR(shared.step_time_s, expected, 1e-9 * expected);
  EXPECT_GT(shared.step_time_s, own.step_time_s);
  EXPECT_LT(shared.step_time_s, 2 * own.step_time_s - a.bubble);
  EXPECT_LE(shared.breakdown_s.compute, 2 * a.compute * (1 + 1e-12));
}

// Ranks in lockstep (tp 4 on 2 cores) take turns on the cores: each computes at a core's speed
// between the layer's collectives and waits in them while the others compute (cost_model_cores.cpp).
// The step is the processor-sharing step as for data parallelism; the compute and the optimizer
// keep their dedicated time and the stretch is tp_comm's, where the runtime measures it.
TEST(DeviceProfile, TensorParallelRanksOnSharedCoresWaitInTheirCollectives) {
  Layout l;
  l.tp = 4;
  l.mbs = 1;
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), l);  // a core each
  const Estimate shared = estimate(host_scenario(4, cpu_profile(2, 2)), l);
  const TimeBreakdown& a = own.breakdown_s;
  const TimeBreakdown& b = shared.breakdown_s;
  const double expected = own.step_time_s + a.compute + a.recompute + a.optimizer;
  std::printf("Expectation: step %.6f s, compute %.6f kept, tp_comm %.6f + %.6f Actual result: step %.6f s, "
              "compute %.6f, tp_comm %.6f\n",
              expected, a.compute, a.tp_comm, a.compute + a.recompute, shared.step_time_s, b.compute, b.tp_comm);
  ASSERT_GT(a.tp_comm, 0);
  EXPECT_NEAR(shared.step_time_s, expected, 1e-9 * expected);
  EXPECT_NEAR(b.compute, a.compute, 1e-12 * a.compute);
  EXPECT_NEAR(b.optimizer, a.optimizer, 1e-12 * a.optimizer);
  EXPECT_NEAR(b.tp_comm, a.tp_comm + a.compute + a.recompute + a.optimizer, 1e-9 * expected);
  EXPECT_NEAR(b.sum(), shared.step_time_s, 1e-9 * expected);
}

// A profile that measured how long an all-reduce holds ranks in lockstep prices each tensor-
// parallel collective at that time: taking turns on the cores (shared_cores:, capplan-train
// measure --shared-cores) for ranks outnumbering the cores, with a core each (lockstep:)
// otherwise. tp_comm grows by the ratio of the measured time to the collective's own, and the
// step by what tp_comm added. Without the measurement nothing changes. Both read back from YAML.
TEST(DeviceProfile, SharedCoreAllReduceTimePricesLockstepCollectives) {
  Layout l;
  l.tp = 4;
  l.mbs = 1;
  l.recompute = Recompute::None;
  const DeviceProfile plain = cpu_profile(2, 2);
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), l);
  const Estimate before = estimate(host_scenario(4, plain), l);
  DeviceProfile measured = plain;
  measured.shared = {{4, 1, 0, {{4, 262144, 0, 0, ""}}, ""}};
  const Estimate base = estimate(host_scenario(4, measured), l);  // measured 0 s: as without
  EXPECT_DOUBLE_EQ(base.step_time_s, before.step_time_s);
  // The collectives of a step at the dedicated rate ...
  const Scenario sc4 = host_scenario(4, cpu_profile(2, 4));
  const StepCosts costs = step_costs(sc4, l);
  double dedicated_tp = 0;
  for (const ChunkCosts& c : costs.chunks) dedicated_tp += c.tp_comm_forward_s + c.tp_comm_backward_s;
  dedicated_tp *= double(own.num_microbatches);
  ASSERT_GT(dedicated_tp, 0);
  // ... and how many there are: per micro-batch two per layer forward and two backward, the
  // embedding's, the LM head's and the cross-entropy's three (one stage holds them all).
  ASSERT_EQ(costs.chunks.size(), 1u);
  const ChunkCosts& c0 = costs.chunks.front();
  const double collectives = double(own.num_microbatches) * (4.0 * c0.num_layers + 5.0);
  // The layout's one TP all-reduce of an activation: a layer's backward holds two, the head one.
  const double per_ar = c0.tp_comm_backward_s / (2.0 * c0.num_layers + 1.0);
  // Measured at 3x that, every collective takes the measured time (the cross-entropy's small ones
  // too: the wait for the others is the same), and the step grows by what tp_comm added.
  measured.shared[0].lockstep[0].allreduce_s = 3 * per_ar;
  const Estimate slower = estimate(host_scenario(4, measured), l);
  const double expected = before.step_time_s + collectives * 3 * per_ar - dedicated_tp;
  std::printf("Expectation: step %.6f s (%.0f collectives at 3 x %.6f s instead of %.6f s) Actual result: %.6f s\n",
              expected, collectives, per_ar, dedicated_tp, slower.step_time_s);
  EXPECT_NEAR(slower.step_time_s, expected, 1e-9 * expected);
  EXPECT_NEAR(slower.breakdown_s.sum(), slower.step_time_s, 1e-9 * expected);
  EXPECT_NEAR(slower.breakdown_s.compute, before.breakdown_s.compute, 1e-12 * before.breakdown_s.compute);
  // A core each: the shared measurement does not apply, the dedicated one (lockstep:) does, at 2x
  // an activation all-reduce's own time, to the collectives that follow a stretch of compute (the
  // layers', the embedding's, the head's); the cross-entropy's three, which follow one another,
  // keep their own time.
  DeviceProfile roomy = measured;
  roomy.cores = 4;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(4, roomy), l).step_time_s, own.step_time_s);
  roomy.lockstep.allreduce_bytes = 262144;
  roomy.lockstep.allreduce_s = 2 * per_ar;
  const Estimate waits = estimate(host_scenario(4, roomy), l);
  const double after_compute = double(own.num_microbatches) * (4.0 * c0.num_layers + 2.0);
  const double grown = after_compute * per_ar;
  std::printf("Expectation: a core each, step %.6f s + %.6f  Actual result: %.6f s\n", own.step_time_s, grown,
              waits.step_time_s);
  EXPECT_NEAR(waits.step_time_s, own.step_time_s + grown, 1e-9 * own.step_time_s);
  EXPECT_NEAR(waits.breakdown_s.tp_comm, own.breakdown_s.tp_comm + grown, 1e-9 * own.step_time_s);
  // Read back from the file capplan writes; a negative time is refused naming the field.
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(measured), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  ASSERT_EQ(q.value->shared.size(), 1u);
  EXPECT_EQ(q.value->shared[0].ranks, 4);
  ASSERT_EQ(q.value->shared[0].lockstep.size(), 1u);
  EXPECT_EQ(q.value->shared[0].lockstep[0].group, 4);
  EXPECT_DOUBLE_EQ(q.value->shared[0].lockstep[0].allreduce_s, measured.shared[0].lockstep[0].allreduce_s);
  EXPECT_DOUBLE_EQ(q.value->shared[0].lockstep[0].allreduce_bytes, 262144);
  const Loaded<DeviceProfile> q2 = parse_device_profile_yaml(device_profile_yaml(roomy), "dev.yaml");
  ASSERT_TRUE(q2.ok()) << q2.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(q2.value->lockstep.allreduce_s, roomy.lockstep.allreduce_s);
  EXPECT_DOUBLE_EQ(q2.value->lockstep.allreduce_bytes, 262144);
  std::string bad = device_profile_yaml(measured);
  const size_t at = bad.find("allreduce_seconds: ");
  ASSERT_NE(at, std::string::npos);
  bad.insert(at + std::string("allreduce_seconds: ").size(), "-");
  expect_refused_naming(bad, "shared_cores[0].lockstep[0].allreduce_seconds");
}

// A pipeline's hand-off between ranks taking turns on the cores takes the profile's measured time
// (shared_cores[].handoff_seconds). Four ranks on 2 cores copy their messages at half a core's
// speed, so a transfer takes twice its own time: its own time is pp_comm (the receiving rank's
// copy on the core it woke on), the rest bubble (its wait for the message and a core); the
// embedding's exchange is pp_comm at twice its own time. At 3x the transfer's own time the step
// grows by the transfers' own time once more (it does not overlap the compute), shown as the
// receiving stage's wait, bubble. The simulator's transfers take the measured time, and without
// a measured hand-off the copy's twice their own.
// With a core each the measurement does not apply.
TEST(DeviceProfile, SharedCoreHandOffPricesPipelineTransfers) {
  Layout l;
  l.pp = 4;
  l.mbs = 1;
  DeviceProfile p = cpu_profile(2, 2);
  p.shared = {{4, 1, 0, {{4, 262144, 0, 0, ""}}, ""}};
  const Scenario before_sc = host_scenario(4, p);
  const Estimate before = estimate(before_sc, l);
  // A transfer's own time (a core each), and on the shared cores its copy at half a core's speed.
  const Scenario own_sc = host_scenario(4, cpu_profile(2, 4));
  const double p2p = step_costs(own_sc, l).p2p_s;
  ASSERT_GT(p2p, 0);
  EXPECT_NEAR(step_costs(before_sc, l).p2p_s, 2 * p2p, 1e-12);
  ASSERT_GT(before.breakdown_s.pp_comm, 0);
  p.shared[0].handoff_s = 3 * p2p;
  const Scenario after_sc = host_scenario(4, p);
  const Estimate after = estimate(after_sc, l);
  // The transfers' own part of pp_comm (the tied embedding's exchange between the end stages is
  // not a hand-off).
  const double sync = step_costs(before_sc, l).embedding_sync_s;
  ASSERT_GT(sync, 0);
  const Estimate own = estimate(own_sc, l);
  const double transfers = own.breakdown_s.pp_comm - sync;
  EXPECT_NEAR(before.breakdown_s.pp_comm, transfers + 2 * sync, 1e-12);
  const double expected = before.step_time_s + transfers;
  std::printf("Expectation: step %.6f s, bubble %.6f + the transfers %.6f  Actual result: step %.6f s, bubble "
              "%.6f\n",
              expected, before.breakdown_s.bubble, transfers, after.step_time_s, after.breakdown_s.bubble);
  EXPECT_NEAR(after.step_time_s, expected, 1e-9 * expected);
  EXPECT_NEAR(after.breakdown_s.pp_comm, before.breakdown_s.pp_comm, 1e-12);
  EXPECT_NEAR(after.breakdown_s.bubble, before.breakdown_s.bubble + transfers, 1e-9 * expected);
  EXPECT_NEAR(after.breakdown_s.compute, before.breakdown_s.compute, 1e-9 * expected);
  EXPECT_NEAR(step_costs(after_sc, l).p2p_s, 3 * p2p, 1e-12);
  // The simulator splits its transfers as the estimate does: a send waited for is pp_comm up to
  // the copy's own time, the rest bubble. So the longer hand-off leaves its pp_comm as it was and
  // adds to its bubble; its pp_comm is the estimate's within the exchange's stretch.
  EXPECT_NEAR(step_costs(after_sc, l).p2p_copy_s, p2p, 1e-12);
  const StepSimulation sim_before = simulate_step(before_sc, l), sim_after = simulate_step(after_sc, l);
  std::printf("Expectation: simulated pp_comm %.6f s both, bubble up  Actual result: pp_comm %.6f -> %.6f s, bubble "
              "%.6f -> %.6f s (estimate's pp_comm %.6f)\n",
              sim_before.breakdown_s.pp_comm, sim_before.breakdown_s.pp_comm, sim_after.breakdown_s.pp_comm,
              sim_before.breakdown_s.bubble, sim_after.breakdown_s.bubble, after.breakdown_s.pp_comm);
  EXPECT_NEAR(sim_after.breakdown_s.pp_comm, sim_before.breakdown_s.pp_comm, 1e-9 * expected);
  EXPECT_GT(sim_after.breakdown_s.bubble, sim_before.breakdown_s.bubble);
  EXPECT_LE(sim_after.breakdown_s.pp_comm, after.breakdown_s.pp_comm + 1e-12);
  EXPECT_GE(sim_after.breakdown_s.pp_comm, after.breakdown_s.pp_comm - sync - 1e-12);
  DeviceProfile roomy = p;
  roomy.cores = 4;
  DeviceProfile roomy_plain = cpu_profile(2, 4);
  EXPECT_DOUBLE_EQ(estimate(host_scenario(4, roomy), l).step_time_s,
                   estimate(host_scenario(4, roomy_plain), l).step_time_s);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  ASSERT_EQ(q.value->shared.size(), 1u);
  EXPECT_DOUBLE_EQ(q.value->shared[0].handoff_s, p.shared[0].handoff_s);
}

// A tensor-parallel pipeline's stages meet in an all-reduce every half layer, polling there with the
// core yielded, so a stage whose message has come gets a core sooner than beside stages computing
// whole passes: its transfers take the profile's hand-off beside pairs in lockstep where the profile
// has one (handoff_lockstep_seconds), and a pipeline without tensor parallelism the plain one.
TEST(DeviceProfile, TensorParallelPipelineTakesTheHandOffBesideLockstep) {
  Layout tp_pp;
  tp_pp.tp = 2;
  tp_pp.pp = 2;
  tp_pp.mbs = 1;
  Layout pp_only;
  pp_only.pp = 4;
  pp_only.mbs = 1;
  DeviceProfile p = cpu_profile(2, 2);
  p.shared = {{4, 1, 0, {{2, 262144, 0, 0, ""}, {4, 262144, 0, 0, ""}}, ""}};
  const double p2p = step_costs(host_scenario(4, cpu_profile(2, 4)), tp_pp).p2p_s;
  ASSERT_GT(p2p, 0);
  p.shared[0].handoff_s = 6 * p2p;
  const Scenario plain_sc = host_scenario(4, p);
  const Estimate plain = estimate(plain_sc, tp_pp), plain_pp = estimate(plain_sc, pp_only);
  // The same hand-off beside lockstep changes nothing; a shorter one shortens tp x pp's transfers.
  p.shared[0].handoff_lockstep_s = 6 * p2p;
  EXPECT_DOUBLE_EQ(estimate(host_scenario(4, p), tp_pp).step_time_s, plain.step_time_s);
  p.shared[0].handoff_lockstep_s = 3 * p2p;
  const Scenario lock_sc = host_scenario(4, p);
  const Estimate lock = estimate(lock_sc, tp_pp);
  std::printf("Expectation: tp 2 x pp 2's transfer %.3g s (beside lockstep), pp 4's %.3g s  Actual result: %.3g s, "
              "%.3g s; bubble %.6f against %.6f\n",
              3 * p2p, step_costs(plain_sc, pp_only).p2p_s, step_costs(lock_sc, tp_pp).p2p_s,
              step_costs(lock_sc, pp_only).p2p_s, lock.breakdown_s.bubble, plain.breakdown_s.bubble);
  EXPECT_NEAR(step_costs(lock_sc, tp_pp).p2p_s, 3 * p2p, 1e-12);
  EXPECT_NEAR(step_costs(plain_sc, tp_pp).p2p_s, 6 * p2p, 1e-12);
  EXPECT_LT(lock.breakdown_s.bubble, plain.breakdown_s.bubble);
  EXPECT_DOUBLE_EQ(estimate(lock_sc, pp_only).step_time_s, plain_pp.step_time_s);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(q.value->shared[0].handoff_lockstep_s, 3 * p2p);
  EXPECT_DOUBLE_EQ(q.value->shared[0].handoff_s, 6 * p2p);
  std::string text = device_profile_yaml(p);
  const size_t at = text.find("handoff_lockstep_seconds: ");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find(',', at) - at, "handoff_lockstep_seconds: -1");
  expect_refused_naming(text, "handoff_lockstep_seconds");
}

// Ranks in lockstep on shared cores: the pipeline's fill and drain run one stage of dp 2 x tp 2 x
// pp 2, 4 ranks on 2 cores, at half a core each (processor sharing), so that bubble is twice what
// it is with a core each; tp 2 x pp 2's fill runs 2 ranks on the 2 cores, unstretched. The
// transfers, which take (ranks / 2) times their own time on the shared cores, add their wait
// beyond their own time (a core's copy, pp_comm) to the bubble.
TEST(DeviceProfile, PipelineFillAndDrainShareTheCoresInLockstep) {
  for (const int dp : {1, 2}) {
    Layout l;
    l.dp = dp;
    l.tp = 2;
    l.pp = 2;
    l.mbs = 1;
    const int ranks = 4 * dp;
    const Scenario own_sc = host_scenario(ranks, cpu_profile(2, ranks));
    const Estimate own = estimate(own_sc, l);
    const Estimate shared = estimate(host_scenario(ranks, cpu_profile(2, 2)), l);
    const double transfers = own.breakdown_s.pp_comm - step_costs(own_sc, l).embedding_sync_s;
    ASSERT_GT(transfers, 0);
    const double expected = (dp == 2 ? 2.0 : 1.0) * own.breakdown_s.bubble + (ranks / 2 - 1) * transfers;
    std::printf("Expectation: dp %d x tp 2 x pp 2 on 2 cores: bubble %.6f s  Actual result: %.6f s\n", dp, expected,
                shared.breakdown_s.bubble);
    ASSERT_GT(own.breakdown_s.bubble, 0);
    EXPECT_NEAR(shared.breakdown_s.bubble, expected, 1e-9 * expected);
  }
}

// Where the profile measured the meetings on the shared cores, the fill and drain's all-reduces
// meet among the ranks active then: tp 2 x pp 2 on 2 cores runs one stage's 2 ranks in them, a
// core each, so they take the dedicated lockstep meeting, not the 4 ranks' one. Expectation: the
// bubble is the one with a core each (its collectives at the dedicated meeting), within 5 % (the
// bubble's collectives are taken as the critical stage's share of its work); the steady state
// keeps the 4 ranks' meeting, and the step is the same.
TEST(DeviceProfile, PipelineFillMeetsAmongTheRanksActiveInIt) {
  Layout l;
  l.tp = 2;
  l.pp = 2;
  l.mbs = 1;
  auto profile = [](int cores, double dedicated, double shared) {
    DeviceProfile p = cpu_profile(2, cores);
    p.lockstep.allreduce_s = dedicated;
    p.shared = {{4, 1, 0, {{2, 262144, shared, 1.0, ""}}, ""}};
    fit_device_profile(p);
    return p;
  };
  const double h1 = 0.02, h4 = 0.2;  // s, long against the all-reduce's own time
  const Estimate own = estimate(host_scenario(4, profile(4, h1, h4)), l);  // a core each
  const Estimate meet = estimate(host_scenario(4, profile(2, h1, h4)), l);
  const Estimate whole = estimate(host_scenario(4, profile(2, h4, h4)), l);  // the fill at the 4 ranks' meeting
  std::printf("Expectation: bubble %.6f s (a core each)  Actual result: %.6f s (%.6f where the fill meets as the "
              "4 ranks do)\n",
              own.breakdown_s.bubble, meet.breakdown_s.bubble, whole.breakdown_s.bubble);
  ASSERT_GT(own.breakdown_s.bubble, 0);
  EXPECT_NEAR(meet.breakdown_s.bubble, own.breakdown_s.bubble, 0.05 * own.breakdown_s.bubble);
  EXPECT_GT(whole.breakdown_s.bubble, 1.5 * meet.breakdown_s.bubble);
  EXPECT_NEAR(meet.step_time_s, whole.step_time_s, 1e-9 * whole.step_time_s);
}

// Shared measurements at several rank counts and lockstep group sizes (capplan profile --measure
// takes twice and four times the cores, groups of 2, 4, ... up to all the ranks): a layout's
// ranks on the host take the figures interpolated linearly between the two rank counts around
// them (the nearest beyond), in the measured group nearest its tp. tp 2 on 4 ranks (dp 2 x tp 2)
// pays groups of 2's all-reduce, not the 4 ranks' one. The form with one map per measurement
// (one all-reduce among all its ranks, the hand-off's size beside it) still reads.
TEST(DeviceProfile, SharedMeasurementsByRanksAndGroup) {
  DeviceProfile p = cpu_profile(2, 2);
  p.shared = {{8, 1, 0.004, {{2, 262144, 0.0004, 0, ""}, {4, 262144, 0.0008, 0, ""}, {8, 262144, 0.0012, 0, ""}}, "eight"},
              {4, 1, 0.001, {{2, 262144, 0.0002, 0, ""}, {4, 262144, 0.0003, 0, ""}}, "four"}};
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  const DeviceProfile& d = *q.value;
  ASSERT_EQ(d.shared.size(), 2u);
  EXPECT_EQ(d.shared[0].ranks, 4);  // sorted by ranks
  EXPECT_EQ(d.shared[1].how, "eight");
  std::printf("Expectation: 4 ranks groups of 2 0.2 ms, of 4 0.3 ms; 6 ranks groups of 2 0.3 ms; 8 ranks groups "
              "of 8 1.2 ms; 16 ranks 1.2 ms; hand-off 1, 2.5, 4 ms at 4, 6, 8 ranks. Actual result: %.3f %.3f %.3f "
              "%.3f %.3f; %.3f %.3f %.3f\n",
              d.shared_allreduce_s(4, 2) * 1e3, d.shared_allreduce_s(4, 4) * 1e3, d.shared_allreduce_s(6, 2) * 1e3,
              d.shared_allreduce_s(8, 8) * 1e3, d.shared_allreduce_s(16, 8) * 1e3, d.shared_handoff_s(4) * 1e3,
              d.shared_handoff_s(6) * 1e3, d.shared_handoff_s(8) * 1e3);
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(4, 2), 0.0002);
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(4, 4), 0.0003);
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(6, 2), 0.0003);
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(8, 8), 0.0012);
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(16, 8), 0.0012);  // beyond the largest: its figure
  EXPECT_DOUBLE_EQ(d.shared_allreduce_s(3, 2), 0.0002);   // below the smallest: its figure
  EXPECT_DOUBLE_EQ(d.shared_handoff_s(4), 0.001);
  EXPECT_DOUBLE_EQ(d.shared_handoff_s(6), 0.0025);
  EXPECT_DOUBLE_EQ(d.shared_handoff_s(8), 0.004);
  EXPECT_LT(DeviceProfile{}.shared_handoff_s(4), 0);  // not measured
  // The cost model: dp 2 x tp 2 on 4 ranks of 2 cores pays the group of 2's time per all-reduce;
  // at the 4-rank group's time tp_comm would be larger.
  Layout l;
  l.dp = 2;
  l.tp = 2;
  l.mbs = 1;
  DeviceProfile pairs = d, quads = d;
  pairs.shared[0].lockstep = {{2, 262144, 0.05, 0, ""}, {4, 262144, 0.10, 0, ""}};
  quads.shared[0].lockstep = {{2, 262144, 0.10, 0, ""}, {4, 262144, 0.05, 0, ""}};
  const Estimate by_pairs = estimate(host_scenario(4, pairs), l), by_quads = estimate(host_scenario(4, quads), l);
  std::printf("Expectation: tp_comm at 50 ms per all-reduce below that at 100 ms. Actual result: %.3f < %.3f s\n",
              by_pairs.breakdown_s.tp_comm, by_quads.breakdown_s.tp_comm);
  EXPECT_LT(by_pairs.breakdown_s.tp_comm, by_quads.breakdown_s.tp_comm);
  // The measured stretch of lockstep ranks' compute (here 1.3 for groups of 2 among 4 ranks, none
  // for groups of 4): dp 2 x tp 2 on 4 ranks of 2 cores computes 1.3x its dedicated time, and the
  // wait in tp_comm gives that time back: the step stays. A stretch beyond what the step leaves
  // room for is cut to it (the wait does not go negative).
  DeviceProfile stretched = pairs;
  stretched.shared[0].lockstep[0].compute_stretch = 1.3;
  const Estimate st = estimate(host_scenario(4, stretched), l);
  std::printf("Expectation: compute x1.3, same step. Actual result: compute %.4f -> %.4f s, step %.4f -> %.4f s\n",
              by_pairs.breakdown_s.compute, st.breakdown_s.compute, by_pairs.step_time_s, st.step_time_s);
  EXPECT_NEAR(st.breakdown_s.compute, 1.3 * by_pairs.breakdown_s.compute, 1e-9 * st.step_time_s);
  EXPECT_NEAR(st.step_time_s, by_pairs.step_time_s, 1e-9 * st.step_time_s);
  EXPECT_LT(st.breakdown_s.tp_comm, by_pairs.breakdown_s.tp_comm);
  stretched.shared[0].lockstep[0].compute_stretch = 100;
  const Estimate cut = estimate(host_scenario(4, stretched), l);
  EXPECT_NEAR(cut.step_time_s, by_pairs.step_time_s, 1e-9 * cut.step_time_s);
  EXPECT_GE(cut.breakdown_s.tp_comm, 0);
  EXPECT_LT(cut.breakdown_s.compute, 100 * by_pairs.breakdown_s.compute);
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(stretched), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  EXPECT_DOUBLE_EQ(back.value->shared_compute_stretch(4, 2), 100);
  EXPECT_LT(back.value->shared_compute_stretch(4, 4), 0);  // not measured for groups of 4
  // One map: one measurement, its all-reduce among all its ranks.
  const Loaded<DeviceProfile> old = parse_device_profile_yaml(
      "device_profile:\n  device: cpu\n  gpu: cpu-rank\n  backend: cpu\n  ranks: 2\n  cores: 2\n"
      "  shared_cores: {ranks: 4, free_efficiency: 0.9, allreduce_bytes: 262144, allreduce_seconds: 0.0005, "
      "handoff_bytes: 262144, handoff_seconds: 0.002, how: \"m\"}\n"
      "  shape: {model: m, hidden: 64, heads: 4, ffn_hidden: 256, vocab: 128, seq: 16, mbs: 1, tp: 1}\n"
      "  fitted: {gemm_peak_gflops: 10, gemm_overhead_us: 0, memory_gbyte_per_s: 5}\nend: true\n",
      "old.yaml");
  ASSERT_TRUE(old.ok()) << old.diagnostics.to_string();
  ASSERT_EQ(old.value->shared.size(), 1u);
  EXPECT_DOUBLE_EQ(old.value->shared_allreduce_s(4, 2), 0.0005);
  EXPECT_EQ(old.value->shared[0].lockstep[0].group, 4);
  EXPECT_DOUBLE_EQ(old.value->shared_handoff_s(4), 0.002);
}

// The runtime's attention kernels work head by head over whole sequences: a profile measured at
// tp 1 prices tp 2's attention at half its measured time (half the heads per rank) rather than
// falling back to per-head GEMMs, and mbs 2 at twice.
TEST(DeviceProfile, AttentionKernelsScaleWithHeadsPerRankAndBatch) {
  DeviceProfile p = cpu_profile(2, 4);
  p.kernels.push_back({"attention forward", 1e8, 0.010});
  p.kernels.push_back({"attention backward", 1.5e8, 0.020});
  auto step_costs_of = [&](const DeviceProfile& dev, int tp, int mbs) {
    Scenario sc = host_scenario(4, dev);
    sc.training.gbs = 8;
    Layout l;
    l.tp = tp;
    l.dp = 4 / tp;
    l.mbs = mbs;
    return step_costs(sc, l).chunks.at(0);
  };
  DeviceProfile slow = p;
  for (KernelTiming& k : slow.kernels)
    if (k.name.rfind("attention", 0) == 0) k.seconds *= 3;
  // The forward grows by the attention's share only: 2 x 0.010 s more per layer at tp 1, half of
  // that at tp 2, twice that at mbs 2 (the chunk has 40 layers).
  const double layers = 40;
  const double d1 = step_costs_of(slow, 1, 1).forward_s - step_costs_of(p, 1, 1).forward_s;
  const double d2 = step_costs_of(slow, 2, 1).forward_s - step_costs_of(p, 2, 1).forward_s;
  const double d3 = step_costs_of(slow, 1, 2).forward_s - step_costs_of(p, 1, 2).forward_s;
  std::printf("Expectation: attention forward per chunk %.3f / %.3f / %.3f s  Actual result: %.3f / %.3f / %.3f s\n",
              layers * 0.020, layers * 0.010, layers * 0.040, d1, d2, d3);
  EXPECT_NEAR(d1, layers * 0.020, 1e-9);
  EXPECT_NEAR(d2, layers * 0.010, 1e-9);
  EXPECT_NEAR(d3, layers * 0.040, 1e-9);
}

// A profile that timed a rank of the runtime's context ring (capplan-train measure: cp 2 over the
// profile's sequence) sets a cp layout's attention: the measured ring scaled by the rank's share
// of the causal scores (b (a / tp) s^2 / cp), in place of the dense kernel cut to the slice's
// scores. Expectation, per chunk of 40 layers: without the ring's kernels cp 2 takes cp x A(s /
// cp) = 2 x 0.010 / 4 of the dense forward; with them 0.008 at cp 2 and 0.004 at cp 4, and the
// backward likewise.
TEST(DeviceProfile, RingAttentionKernelsSetAContextLayoutsAttention) {
  DeviceProfile p = cpu_profile(4, 4);
  p.kernels.push_back({"attention forward", 1e8, 0.010});
  p.kernels.push_back({"attention backward", 1.5e8, 0.020});
  DeviceProfile ring = p;
  ring.kernels.push_back({"ring attention forward", 5e7, 0.008});
  ring.kernels.push_back({"ring attention backward", 7.5e7, 0.018});
  auto chunk = [&](const DeviceProfile& dev, int cp) {
    Scenario sc = host_scenario(4, dev);
    Layout l;
    l.cp = cp;
    l.dp = 4 / cp;
    l.mbs = 1;
    l.recompute = Recompute::None;
    return step_costs(sc, l).chunks.at(0);
  };
  const double layers = 40;
  const ChunkCosts dense2 = chunk(p, 2), ring2 = chunk(ring, 2);
  const double fwd2 = ring2.forward_s - dense2.forward_s;
  const double bwd2 = ring2.backward_input_s - dense2.backward_input_s;
  // cp 4: the ring measured at cp 2 scaled to half (each rank holds a quarter of the queries,
  // over the whole sequence), against 4 x A(s / 4) = 0.010 / 4 without it.
  const double fwd4 = chunk(ring, 4).forward_s - chunk(p, 4).forward_s;
  std::printf("Expectation: forward per chunk +%.3f s at cp 2, backward +%.3f s, forward +%.3f s at cp 4  "
              "Actual result: +%.3f, +%.3f, +%.3f\n",
              layers * (0.008 - 0.005), layers * (0.018 - 0.010), layers * (0.004 - 0.0025), fwd2, bwd2, fwd4);
  EXPECT_NEAR(fwd2, layers * (0.008 - 0.005), 1e-9);
  EXPECT_NEAR(bwd2, layers * (0.018 - 0.010), 1e-9);
  EXPECT_NEAR(fwd4, layers * (0.004 - 0.0025), 1e-9);
}

// Selective recompute reruns the attention forward on operands written a pass earlier: a profile's
// "attention recompute" (measured on operands from memory) prices it, scaled like the forward;
// without that entry the forward's time does. Expectation: 40 layers x 0.013 s per chunk, then
// 40 x 0.010 s.
TEST(DeviceProfile, SelectiveRecomputeTakesTheColdAttentionForward) {
  DeviceProfile p = cpu_profile(2, 4);
  p.kernels.push_back({"attention forward", 1e8, 0.010});
  p.kernels.push_back({"attention backward", 1.5e8, 0.020});
  Scenario sc = host_scenario(4, p);
  sc.training.gbs = 8;
  Layout l;
  l.dp = 4;
  l.mbs = 1;
  l.recompute = Recompute::Selective;
  const double warm = step_costs(sc, l).chunks.at(0).recompute_s;
  p.kernels.push_back({"attention recompute", 1e8, 0.013});
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(p);
  const double cold = step_costs(sc, l).chunks.at(0).recompute_s;
  std::printf("Expectation: recompute per chunk %.3f s (cold) / %.3f s (warm)  Actual result: %.3f / %.3f s\n",
              40 * 0.013, 40 * 0.010, cold, warm);
  EXPECT_NEAR(cold, 40 * 0.013, 1e-9);
  EXPECT_NEAR(warm, 40 * 0.010, 1e-9);
}

// synthetic_profile() with reduce-scatters of `ranks` ranks at 20 GB/s and all-gathers at 40 GB/s
// (+10 us each), timed at 1 MB and at `largest` bytes.
DeviceProfile with_halves(double largest, int ranks = 4) {
  DeviceProfile p = synthetic_profile();
  for (double bytes : {1e6, largest}) {
    p.collectives.push_back({"reduce-scatter", ranks, bytes, 10e-6 + bytes / 20e9});
    p.collectives.push_back({"all-gather", ranks, bytes, 10e-6 + bytes / 40e9});
  }
  fit_device_profile(p);
  return p;
}

// GPT-3 13B on one p4d.24xlarge cut to 4 GPUs, gbs 8.
Scenario gpt3_13b_on_four_gpus() {
  Scenario sc;
  sc.model = *load_model("gpt3-13b").value;
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  sc.cluster.gpus_per_node = 4;
  sc.nodes = 1;
  sc.training.gbs = 8;
  return sc;
}

// dp_comm of `sc` priced with `dev` for `dp` ranks of one node of 8 (mbs 1, ZeRO `zero`).
// The exchange's collectives: dp_comm less ZeRO-0's shard move (shard_move_s).
double dp_comm_on_a_node_of_8(Scenario s, const DeviceProfile& dev, int dp, int zero) {
  s.cluster.gpus_per_node = 8;
  s.gpus = dp;
  s.cluster.device_profile = std::make_shared<const DeviceProfile>(dev);
  Layout l;
  l.dp = dp;
  l.mbs = 1;
  l.zero = zero;
  const Estimate e = estimate(s, l);
  return e.breakdown_s.dp_comm - (zero == 0 ? shard_move_s(e, dev, dp) : 0.0);
}

// A profile's measured collectives time the groups of the size it measured, interpolated by
// size; other sizes keep the fitted curves. ZeRO-1's reduce-scatter of the gradients takes the
// measured reduce-scatter, so three times slower reduce-scatters lengthen its dp_comm, and plain
// data parallelism's exchange (a reduce-scatter and an all-gather in capplan-train) by as much.
TEST(DeviceProfile, MeasuredCollectivesTimeTheirGroupSize) {
  const DeviceProfile p = with_halves(1e8);
  EXPECT_NEAR(p.collective_seconds("reduce-scatter", 4, 5e7), 10e-6 + 5e7 / 20e9, 1e-12);
  EXPECT_NEAR(p.collective_seconds("all-gather", 4, 2e8), 10e-6 + 2e8 / 40e9, 1e-12);  // the last line, beyond
  EXPECT_NEAR(p.collective_seconds("all-gather", 4, 1e3), 10e-6 + 1e6 / 40e9, 1e-12);  // below: the smallest
  EXPECT_LT(p.collective_seconds("all-gather", 8, 1e6), 0);
  EXPECT_LT(p.collective_seconds("send-recv", 4, 1e6), 0);
  const Scenario sc = gpt3_13b_on_four_gpus();
  DeviceProfile slow = p;
  for (CollectiveTiming& c : slow.collectives)
    if (c.op == "reduce-scatter") c.seconds *= 3;
  fit_device_profile(slow);
  auto dp_comm = [&](const DeviceProfile& dev, int zero) {
    Scenario s = sc;
    s.cluster.device_profile = std::make_shared<const DeviceProfile>(dev);
    Layout l;
    l.dp = 4;
    l.mbs = 1;
    l.zero = zero;
    return estimate(s, l).breakdown_s.dp_comm;
  };
  const double z1 = dp_comm(p, 1), z1_slow = dp_comm(slow, 1);
  const double z0 = dp_comm(p, 0), z0_slow = dp_comm(slow, 0);
  std::printf("Expectation: ZeRO-1 dp_comm grows with reduce-scatters 3x slower, and plain DP by as much "
              "(capplan-train exchanges its gradients as a reduce-scatter and an all-gather)  Actual result: "
              "%.4f -> %.4f s, plain %.4f -> %.4f s\n",
              z1, z1_slow, z0, z0_slow);
  EXPECT_GT(z1_slow, 1.5 * z1);
  // Both reduce-scatter the same gradients: tripling that op adds the same time to both.
  EXPECT_GT(z0_slow, z0);
  EXPECT_NEAR(z0_slow - z0, z1_slow - z1, 1e-12);
  // A group of 8 on a node of 8, with the collectives measured among 4: the measured times scaled
  // by the ring's (n-1)/n, so plain DP's exchange (the same gradient bytes) takes 7/8 / 3/4 = 7/6
  // of dp 4's.
  auto plain_dp = [&](int dp) { return dp_comm_on_a_node_of_8(sc, p, dp, 0); };
  std::printf("Expectation: dp 8 / dp 4 exchange 7/6  Actual result: %.6f\n", plain_dp(8) / plain_dp(4));
  EXPECT_NEAR(plain_dp(8) / plain_dp(4), 7.0 / 6.0, 1e-9);
}

// A profile that timed capplan-train's exchange as its optimizer calls it ("gradient-exchange":
// the reduce-scatter, the gather of the norm's partial sums, the all-gather, one after another)
// prices ZeRO-0's and ZeRO-1's data-parallel traffic of that group size at that time; a group of
// another size keeps the two collectives timed apart. Here the exchange takes 1.5 times the sum of
// with_halves()'s two collectives at every size (its interpolation exact, all three lines in the
// bytes), GPT-3 13B on dp 4 in fp32 (weights and gradients as wide, as the CPU runtime keeps them).
TEST(DeviceProfile, GradientExchangeTimedAsOneSetsZeroZeroAndOne) {
  const DeviceProfile halves = with_halves(1e10);
  DeviceProfile timed = halves;
  for (double bytes : {1e6, 1e10})
    timed.collectives.push_back({"gradient-exchange", 4, bytes,
                                 1.5 * (halves.collective_seconds("reduce-scatter", 4, bytes) +
                                        halves.collective_seconds("all-gather", 4, bytes)),
                                 true});
  fit_device_profile(timed);
  Scenario sc = gpt3_13b_on_four_gpus();
  sc.training.precision = Precision::Fp32;
  auto dp_comm = [&](const DeviceProfile& dev, int dp, int zero) { return dp_comm_on_a_node_of_8(sc, dev, dp, zero); };
  for (int zero : {0, 1}) {
    const double apart = dp_comm(halves, 4, zero), as_one = dp_comm(timed, 4, zero);
    std::printf("Expectation: ZeRO-%d dp 4's exchange 1.5x with the exchange timed as one  Actual result: "
                "%.4f -> %.4f s (x%.4f)\n", zero, apart, as_one, as_one / apart);
    EXPECT_GT(apart, 0);
    EXPECT_NEAR(as_one / apart, 1.5, 1e-9);
  }
  // dp 8: not timed for 8 ranks, the halves scaled as before.
  EXPECT_NEAR(dp_comm(timed, 8, 0), dp_comm(halves, 8, 0), 1e-15);
  // ZeRO-2 reduces layer by layer (another pattern): unchanged.
  EXPECT_NEAR(dp_comm(timed, 4, 2), dp_comm(halves, 4, 2), 1e-15);
}

// ZeRO-2 and ZeRO-3 with a device profile are priced as capplan-train runs them: one collective
// per unit of the flat parameter buffer (the embedding, each layer, the final norm), each moving
// the largest part of the unit that falls in one rank's shard, timed as an even collective of
// dp times that part; ZeRO-2 reduces each layer every micro-batch and the ends once, then gathers
// the updated weights; ZeRO-3 gathers 2 m (layers - 1) + 1 layers and the ends once, out of
// place (the largest part copied too), and reduces as ZeRO-2. Every call blocks its rank, so all
// of it is exposed, and the simulator gets it as ZeRO-3's exposed wait. Here GPT-3 13B on dp 4 at
// gbs 8 (two micro-batches per rank), fp32.
// capplan-train's data-parallel traffic of a step under ZeRO-2 or 3, worked out here shard by
// shard from the model's parameter counts: the units (the embedding, each layer, the final norm;
// the head is tied), each timed as the profile's even collective of dp times its largest part in
// one shard; a gather also copies that part (at the profile's memory bandwidth). `m` micro-batches.
struct RuntimeTraffic {
  double zero2 = 0, zero3 = 0;
  double layer_reductions = 0, even_layer_reductions = 0;  // one micro-batch's, and as even splits
  double gathers = 0;                                     // ZeRO-3's gathers
  std::vector<std::pair<int, double>> gather_calls;       // per unit: ZeRO-3's gathers of it, bytes each
  int units_in_one_shard = 0, units = 0;
};
RuntimeTraffic runtime_traffic(const Scenario& sc, const DeviceProfile& p, int dp, int m) {
  const ModelProfile prof = profile_model(sc.model, 1, sc.seq_len(), 1, Precision::Fp32);
  const int nl = sc.model.layers;
  std::vector<double> units{prof.layers.front().params};
  for (int i = 1; i <= nl; ++i) units.push_back(prof.layers[size_t(i)].params);
  units.push_back(prof.layers[size_t(nl) + 1].params);
  double total = 0;
  for (double u : units) total += u;
  const double shard = std::ceil(total / dp);
  RuntimeTraffic t;
  double begin = 0, rs = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    double largest = 0;
    for (int r = 0; r < dp; ++r)
      largest = std::max(largest, std::min(begin + units[u], (r + 1) * shard) - std::max(begin, r * shard));
    t.units_in_one_shard += largest == units[u] ? 1 : 0;
    const double bytes = dp * largest * 4;  // fp32
    const double t_rs = p.collective_seconds("reduce-scatter", dp, bytes),
                 t_ag = p.collective_seconds("all-gather", dp, bytes) + 2 * largest * 4 / (p.memory_gbyte_per_s * 1e9);
    const bool layer = u >= 1 && u <= size_t(nl);
    rs += layer ? m * t_rs : t_rs;
    t.layer_reductions += layer ? t_rs : 0;
    t.even_layer_reductions += layer ? p.collective_seconds("reduce-scatter", dp, units[u] * 4) : 0;
    // Gathers: forward 1 + (m - 1) unless the first layer, backward m unless the last; the ends once.
    const int i = int(u) - 1;
    const int calls = layer ? (1 + (i > 0 ? m - 1 : 0)) + (i < nl - 1 ? m : 0) : 1;
    t.gathers += calls * t_ag;
    t.gather_calls.emplace_back(calls, bytes);
    begin += units[u];
  }
  t.units = int(units.size());
  t.zero2 = rs + p.collective_seconds("all-gather", dp, dp * shard * 4);  // + the updated weights
  t.zero3 = rs + t.gathers;
  return t;
}

TEST(DeviceProfile, ShardedDataParallelIsPricedAsTheRuntimeRunsIt) {
  const DeviceProfile p = with_halves(1e10);
  Scenario sc = gpt3_13b_on_four_gpus();
  sc.training.precision = Precision::Fp32;
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(p);
  auto costs = [](const Scenario& s, int dp, int mbs, int zero) {
    Layout l;
    l.dp = dp;
    l.mbs = mbs;
    l.zero = zero;
    return std::make_pair(estimate(s, l), step_costs(s, l));
  };
  const RuntimeTraffic t = runtime_traffic(sc, p, 4, 2);  // gbs 8 over dp 4 at mbs 1
  ASSERT_GT(t.units_in_one_shard, 30);                     // 40 layers over 4 shards: most lie inside one
  const auto [z2, z2_steps] = costs(sc, 4, 1, 2);
  const auto [z3, z3_steps] = costs(sc, 4, 1, 3);
  std::printf("Expectation: ZeRO-2 dp_comm %.6f s, ZeRO-3 %.6f s, all exposed  Actual result: %.6f, %.6f s\n",
              t.zero2, t.zero3, z2.breakdown_s.dp_comm, z3.breakdown_s.dp_comm);
  EXPECT_NEAR(z2.breakdown_s.dp_comm, t.zero2, 1e-9 * t.zero2);
  EXPECT_NEAR(z3.breakdown_s.dp_comm, t.zero3, 1e-9 * t.zero3);
  // A layer inside one shard is all sent to its owner: four times an even split's share, so the
  // layers' reduce-scatters take over three times what even splits of them would.
  EXPECT_GT(t.layer_reductions, 3 * t.even_layer_reductions);
  // The simulator waits for all of it: ZeRO-2 as one task after the backward, ZeRO-3 as its
  // exposed wait.
  EXPECT_FALSE(z2_steps.dp_overlap);
  EXPECT_NEAR(z3_steps.zero3_exposed_s, t.zero3, 1e-9 * t.zero3);
  // Units larger than a shard: the 4-layer, 256-wide model on dp 8, whose embedding (1.08 M
  // parameters) spans three shards of 0.53 M and each layer (0.79 M) two or three.
  Scenario small = sc;
  small.model.name = "4x256";
  small.model.layers = 4;
  small.model.hidden = 256;
  small.model.heads = 8;
  small.model.kv_heads = 0;
  small.model.ffn_hidden = 0;
  small.model.vocab = 4096;
  small.model.seq_len = 128;
  small.training.gbs = 32;
  small.cluster.gpus_per_node = 8;
  const DeviceProfile p8 = with_halves(1e10, 8);
  small.cluster.device_profile = std::make_shared<const DeviceProfile>(p8);
  const RuntimeTraffic t8 = runtime_traffic(small, p8, 8, 2);  // gbs 32 over dp 8 at mbs 2
  EXPECT_EQ(t8.units_in_one_shard, 1);                        // the final norm only
  const double z2_8 = costs(small, 8, 2, 2).first.breakdown_s.dp_comm;
  const double z3_8 = costs(small, 8, 2, 3).first.breakdown_s.dp_comm;
  std::printf("Expectation: dp 8, units over several shards: ZeRO-2 %.6f s, ZeRO-3 %.6f s  Actual result: "
              "%.6f, %.6f s\n", t8.zero2, t8.zero3, z2_8, z3_8);
  EXPECT_NEAR(z2_8, t8.zero2, 1e-9 * t8.zero2);
  EXPECT_NEAR(z3_8, t8.zero3, 1e-9 * t8.zero3);
  // Without the profile the ring pricing and its overlap stand: ZeRO-3 hides part of its traffic.
  Scenario plain = sc;
  plain.cluster.device_profile = nullptr;
  EXPECT_TRUE(costs(plain, 4, 1, 3).second.dp_overlap);
}

// Where the profile timed capplan-train's own ZeRO-3 gather (MPI_Allgatherv from the shard into
// the layer buffer, "all-gather-v", cold), each gather takes that time for dp times the unit's
// largest part, the copy included; the reductions and ZeRO-2 keep the reduce-scatter and the
// in-place all-gather. GPT-3 13B on dp 4 at gbs 8, fp32, as above.
TEST(DeviceProfile, ZeroThreeGathersTakeTheRuntimesOwnGatherWhereTheProfileTimedIt) {
  const DeviceProfile halves = with_halves(1e10);
  DeviceProfile p = halves;
  for (double bytes : {1e6, 1e10}) p.collectives.push_back({"all-gather-v", 4, bytes, 5e-6 + bytes / 80e9, true});
  Scenario sc = gpt3_13b_on_four_gpus();
  sc.training.precision = Precision::Fp32;
  Layout l;
  l.dp = 4;
  l.mbs = 1;
  auto dp_comm = [&](const DeviceProfile& prof, int zero) {
    sc.cluster.device_profile = std::make_shared<const DeviceProfile>(prof);
    l.zero = zero;
    return estimate(sc, l).breakdown_s.dp_comm;
  };
  const RuntimeTraffic t = runtime_traffic(sc, halves, 4, 2);
  // The gathers of runtime_traffic, each at the all-gather-v line instead of all-gather + copy.
  double gathers = 0;
  for (const auto& [calls, bytes] : t.gather_calls)
    gathers += calls * p.collective_seconds("all-gather-v", 4, bytes, true);
  const double want = t.zero3 - t.gathers + gathers;
  std::printf("Expectation: ZeRO-3 dp_comm with the runtime's gather timed %.6f s  Actual result: %.6f s\n", want,
              dp_comm(p, 3));
  EXPECT_NEAR(dp_comm(p, 3), want, 1e-9 * want);
  EXPECT_LT(dp_comm(p, 3), dp_comm(halves, 3));  // the line above is faster than all-gather + copy
  EXPECT_EQ(dp_comm(p, 2), dp_comm(halves, 2));   // ZeRO-2 has no such gather
  // Timed for 2 ranks only: the group of 4 keeps the all-gather's pricing (its measured size).
  DeviceProfile two = halves;
  for (double bytes : {1e6, 1e10}) two.collectives.push_back({"all-gather-v", 2, bytes, 5e-6 + bytes / 80e9, true});
  EXPECT_EQ(dp_comm(two, 3), dp_comm(halves, 3));
}

// A data-parallel group's collectives move gradients and weights a pass left in memory: with
// collectives timed on buffers from memory twice as slow as on warm ones, ZeRO-1's dp_comm of a
// measured group size doubles; the tensor-parallel all-reduce (an activation just computed) keeps
// the warm time, and so does a group of a size not measured (its ring's chunks pass through the
// caches). The flag reads back from YAML, and an op timed warm only answers a cold request.
TEST(DeviceProfile, DataParallelCollectivesTakeTheColdTimes) {
  DeviceProfile warm = synthetic_profile();
  for (const char* op : {"reduce-scatter", "all-gather"})  // the all-reduce of 4: synthetic_profile's
    for (double bytes : {1e6, 1e9}) warm.collectives.push_back({op, 4, bytes, 10e-6 + bytes / 20e9});
  for (double bytes : {1e6, 1e9}) warm.collectives.push_back({"send-recv", 2, bytes, 5e-6 + bytes / 10e9});
  fit_device_profile(warm);
  DeviceProfile cold = warm;
  for (const CollectiveTiming& c : warm.collectives)
    if (c.op != "send-recv") cold.collectives.push_back({c.op, 4, c.bytes, 2 * c.seconds, true});
  fit_device_profile(cold);
  EXPECT_NEAR(cold.collective_seconds("all-gather", 4, 5e8, true), 2 * cold.collective_seconds("all-gather", 4, 5e8),
              1e-12);
  EXPECT_EQ(cold.collective_seconds("all-gather", 4, 5e8), warm.collective_seconds("all-gather", 4, 5e8));
  EXPECT_NEAR(cold.collective_seconds("send-recv", 2, 1e6, true), 5e-6 + 1e6 / 10e9, 1e-15);  // the warm time
  ASSERT_EQ(cold.fits.size(), warm.fits.size());  // the fits are over the warm times
  for (size_t i = 0; i < cold.fits.size(); ++i)
    EXPECT_EQ(cold.fits[i].bandwidth_gbyte_per_s, warm.fits[i].bandwidth_gbyte_per_s);
  const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(cold), "dev.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  ASSERT_EQ(back.value->collectives.size(), cold.collectives.size());
  EXPECT_TRUE(back.value->collectives.back().cold);
  EXPECT_FALSE(back.value->collectives.front().cold);

  Scenario sc;
  sc.model = *load_model("gpt3-13b").value;
  sc.cluster = *load_cluster("p4d.24xlarge").value;
  sc.nodes = 1;
  sc.training.gbs = 8;
  auto breakdown = [&](const DeviceProfile& dev, int gpus_per_node, int dp, int tp) {
    Scenario s = sc;
    s.cluster.gpus_per_node = gpus_per_node;
    s.gpus = dp * tp;
    s.cluster.device_profile = std::make_shared<const DeviceProfile>(dev);
    Layout l;
    l.dp = dp;
    l.tp = tp;
    l.mbs = 1;
    l.zero = 1;
    return estimate(s, l).breakdown_s;
  };
  const double z1_warm = breakdown(warm, 4, 4, 1).dp_comm, z1_cold = breakdown(cold, 4, 4, 1).dp_comm;
  std::printf("Expectation: dp 4 ZeRO-1 dp_comm doubles on cold buffers  Actual result: %.4f -> %.4f s\n", z1_warm,
              z1_cold);
  EXPECT_NEAR(z1_cold, 2 * z1_warm, 1e-9 * z1_warm);
  EXPECT_EQ(breakdown(cold, 4, 1, 4).tp_comm, breakdown(warm, 4, 1, 4).tp_comm);
  EXPECT_GT(breakdown(warm, 4, 1, 4).tp_comm, 0);
  EXPECT_EQ(breakdown(cold, 8, 8, 1).dp_comm, breakdown(warm, 8, 8, 1).dp_comm);
}

// The tied embedding's gradient exchange between the end stages of a pipeline on one host takes
// the profile's measured point-to-point time for its bytes (each end sends its gradient and both
// receive at once, as capplan-train does): ten times slower sends make it ten times longer, and
// slower all-reduces leave it as it is. Without point-to-point timings it is a 2-member all-reduce.
TEST(DeviceProfile, TiedEmbeddingExchangeTakesTheMeasuredPointToPoint) {
  Layout l;
  l.pp = 2;
  l.mbs = 1;
  auto sync = [&](double p2p_Bps, double allreduce_factor, bool with_p2p) {
    DeviceProfile p = cpu_profile(2, 2);
    for (CollectiveTiming& c : p.collectives) c.seconds *= allreduce_factor;
    if (with_p2p)
      for (double bytes : {1e6, 1e9}) p.collectives.push_back({"send-recv", 2, bytes, bytes / p2p_Bps});
    fit_device_profile(p);
    return step_costs(host_scenario(2, p), l).embedding_sync_s;
  };
  const double fast = sync(10e9, 1, true), slow = sync(1e9, 1, true);
  std::printf("Expectation: the exchange 10x longer at a tenth of the point-to-point rate  Actual result: %.6f -> "
              "%.6f s\n", fast, slow);
  ASSERT_GT(fast, 0);
  EXPECT_NEAR(slow, 10 * fast, 1e-9 * slow);
  EXPECT_DOUBLE_EQ(sync(10e9, 3, true), fast);
  EXPECT_GT(sync(10e9, 3, false), sync(10e9, 1, false));  // no send-recv: the all-reduce
}

// The optimizer step takes the profile's measured rate of the runtime's own step (its "adamw"
// kernel, timed on operands from memory) where the profile has it, else the fitted bandwidth of
// the memory-bound kernels: at half the fitted bandwidth's rate the optimizer term doubles, and
// with the kernel left out it is back to the fit's.
TEST(DeviceProfile, OptimizerTakesTheMeasuredStepRate) {
  Layout l;
  l.dp = 2;
  l.mbs = 1;
  DeviceProfile p = cpu_profile(2, 2);
  p.kernels.erase(std::remove_if(p.kernels.begin(), p.kernels.end(),
                                 [](const KernelTiming& k) { return k.name == "adamw"; }),
                  p.kernels.end());
  const Estimate fitted = estimate(host_scenario(2, p), l);
  const double rate = p.memory_gbyte_per_s * 1e9 / 2;  // half the fitted bandwidth
  p.kernels.push_back({"adamw", 1e8, 1e8 / rate});
  const Estimate measured = estimate(host_scenario(2, p), l);
  std::printf("Expectation: optimizer x2 at half the rate. Actual result: %.6f -> %.6f s\n",
              fitted.breakdown_s.optimizer, measured.breakdown_s.optimizer);
  ASSERT_GT(fitted.breakdown_s.optimizer, 0);
  EXPECT_NEAR(measured.breakdown_s.optimizer, 2 * fitted.breakdown_s.optimizer, 1e-9);
  EXPECT_NEAR(measured.step_time_s - fitted.step_time_s, fitted.breakdown_s.optimizer, 1e-9);
}

// Before its step capplan-train sums the squares of each rank's shard of the gradients (1 / dp of
// them) for the global norm: priced at the profile's "gradient norm after exchange" where a
// reduce-scatter has just written the shard (ZeRO-0 and -1 over more than one rank), else at its
// "gradient norm" from memory (ZeRO-2, whose shard was reduced during the backward; one rank).
// Expectation, warm 4x the cold rate: ZeRO-2's sum 4x ZeRO-0's and ZeRO-1's; one rank with both
// cores (two threads) over all the gradients as long as ZeRO-2's rank over half of them on one;
// the step longer by the sum; the memory-bound fit untouched by these kernels; no sum priced
// without them.
TEST(DeviceProfile, GradientNormSumsTheShardWarmAfterTheExchange) {
  const double cold_Bps = 2e9;
  DeviceProfile with = cpu_profile(2, 2), without = with;
  with.kernels.push_back({"gradient norm", 1e8, 1e8 / cold_Bps});
  with.kernels.push_back({"gradient norm after exchange", 1e8, 1e8 / (4 * cold_Bps)});
  fit_device_profile(with);
  fit_device_profile(without);
  EXPECT_DOUBLE_EQ(with.memory_gbyte_per_s, without.memory_gbyte_per_s);
  auto sum_s = [&](int ranks, int dp, int zero) {
    Layout l;
    l.dp = dp;
    l.zero = zero;
    l.mbs = 1;
    const Estimate a = estimate(host_scenario(ranks, with), l), b = estimate(host_scenario(ranks, without), l);
    EXPECT_NEAR(a.step_time_s - b.step_time_s, a.breakdown_s.optimizer - b.breakdown_s.optimizer, 1e-9);
    return a.breakdown_s.optimizer - b.breakdown_s.optimizer;
  };
  const double z0 = sum_s(2, 2, 0), z1 = sum_s(2, 2, 1), z2 = sum_s(2, 2, 2), one = sum_s(1, 1, 0);
  std::printf("Expectation: ZeRO-2 4x ZeRO-0 and -1, one rank as ZeRO-2. Actual result: %.6f %.6f %.6f %.6f s\n",
              z0, z1, z2, one);
  ASSERT_GT(z0, 0);
  EXPECT_NEAR(z1, z0, 1e-12);
  EXPECT_NEAR(z2, 4 * z0, 1e-9);
  EXPECT_NEAR(one, z2, 1e-9);

  // pp 2: the pacing stage is the last (it has the LM head), whose copy of a tied embedding the
  // norm does not count (the first stage's is counted): its sum reads the head's weights only
  // where they are its own, untied. The step's AdamW is the same either way.
  auto pp_sum = [&](bool tied) {
    Layout l;
    l.pp = 2;
    l.mbs = 1;
    Scenario a = host_scenario(2, with), b = host_scenario(2, without);
    a.model.tied_embeddings = b.model.tied_embeddings = tied;
    return estimate(a, l).breakdown_s.optimizer - estimate(b, l).breakdown_s.optimizer;
  };
  const Scenario sc = host_scenario(2, with);
  const double head = profile_model(sc.model, 1, sc.model.seq_len, 1).layers.back().params;
  const double tied = pp_sum(true), untied = pp_sum(false);
  std::printf("Expectation: pp 2's sum shorter tied by the head's %.0f weights read. Actual result: %.6f -> %.6f s\n",
              head, untied, tied);
  ASSERT_GT(tied, 0);
  EXPECT_NEAR(untied - tied, head * 4 / cold_Bps, 1e-9);
}

// A pipeline's transfer between CPU ranks with a core each waits as a context ring's exchange
// around a segment of compute does: the link's time and the profile's lockstep exchange less its
// own swap. Expectation: pp 2's pipeline communication grows with that wait, twice the wait twice
// the growth; a profile without the lockstep exchange, and ranks outnumbering the cores (pp 4 on
// 2 cores, whose hand-off cost_model_cores.cpp prices), keep the link's time.
TEST(DeviceProfile, PipelineTransfersWithACoreEachWaitTheLockstepExchange) {
  const double bytes = 262144, swap = bytes / 10e9;
  auto pp_comm = [&](double wait_s, int ranks, int pp) {
    DeviceProfile p = cpu_profile(2, 2);
    for (double b : {1e3, 1e9}) p.collectives.push_back({"send-recv", 2, b, b / 10e9});
    if (wait_s >= 0) {
      p.lockstep.exchange_bytes = bytes;
      p.lockstep.exchange_s = swap + wait_s;
    }
    fit_device_profile(p);
    Layout l;
    l.pp = pp;
    l.mbs = 1;
    return estimate(host_scenario(ranks, p), l).breakdown_s.pp_comm;
  };
  const double link = pp_comm(-1, 2, 2), w1 = pp_comm(1e-4, 2, 2), w2 = pp_comm(2e-4, 2, 2);
  std::printf("Expectation: pp 2's pp_comm grows with the wait, twice for twice. Actual result: %.6f %.6f %.6f s\n",
              link, w1, w2);
  ASSERT_GT(w1, link);
  EXPECT_NEAR(w2 - link, 2 * (w1 - link), 1e-9);
  EXPECT_NEAR(pp_comm(0, 2, 2), link, 1e-12);  // no wait beyond the swap: the link's time
  EXPECT_NEAR(pp_comm(1e-4, 4, 4), pp_comm(-1, 4, 4), 1e-12);
}

// capplan-train's context ring on CPU ranks moves each block while the ranks wait for it (Open
// MPI's rendezvous protocol progresses only inside MPI calls), so with a profile of the cpu
// backend every exchange is exposed: per layer and micro-batch cp - 1 in the forward and 2 (cp - 1)
// + 1 in the backward (K, V and their gradients, then the gradients' hop home), each at the
// profile's measured send-recv of the block or, where the ranks' measured lockstep meeting is
// longer, at that; where the host's ranks outnumber its cores, at least the measured hand-off
// among them. Expectation: cp_comm = m x layers x 4 x the exchange at cp 2; the exchange follows
// the send-recv rate, then the lockstep time, then the hand-off; without the profile the ring
// hides behind the attention (cp_comm 0 on an A100 at these shapes).
TEST(DeviceProfile, ContextRingOnCpuRanksIsExposedAtTheMeetingTime) {
  Layout l;
  l.cp = 2;
  l.mbs = 1;
  l.recompute = Recompute::None;
  auto run = [&](double p2p_Bps, double lockstep_s, StepCosts* costs) {
    DeviceProfile p = cpu_profile(2, 2);
    for (double bytes : {1e6, 1e9}) p.collectives.push_back({"send-recv", 2, bytes, bytes / p2p_Bps});
    p.lockstep.allreduce_s = lockstep_s;
    fit_device_profile(p);
    const Scenario sc = host_scenario(2, p);
    *costs = step_costs(sc, l);
    return estimate(sc, l);
  };
  StepCosts fast_costs, slow_costs, lock_costs;
  const Estimate fast = run(10e9, 0, &fast_costs), slow = run(1e9, 0, &slow_costs);
  const double bytes = fast_costs.cp_block_bytes;
  ASSERT_GT(bytes, 0);
  const double x = bytes / 10e9;
  const int layers = host_scenario(2, cpu_profile(2, 2)).model.layers;
  const double expected = double(fast.num_microbatches) * layers * 4 * x;
  std::printf("Expectation: cp_comm %.6f s (%d layers x %lld micro-batches x 4 exchanges of %.0f bytes)  "
              "Actual result: %.6f s; at a tenth of the rate %.6f s\n",
              expected, layers, static_cast<long long>(fast.num_microbatches), bytes, fast.breakdown_s.cp_comm,
              slow.breakdown_s.cp_comm);
  EXPECT_NEAR(fast.breakdown_s.cp_comm, expected, 1e-6 * expected);
  // The simulator replays the same exposed ring (its transfers after each pass's compute, the
  // gradients' hop home spread over the backward's): its step and cp_comm agree with the estimate.
  DeviceProfile fast_profile = cpu_profile(2, 2);
  for (double b : {1e6, 1e9}) fast_profile.collectives.push_back({"send-recv", 2, b, b / 10e9});
  fit_device_profile(fast_profile);
  const StepSimulation sim = simulate_step(host_scenario(2, fast_profile), l);
  std::printf("Expectation: simulated step %.6f s, cp_comm %.6f s  Actual result: %.6f s, %.6f s\n",
              fast.step_time_s, fast.breakdown_s.cp_comm, sim.step_time_s, sim.breakdown_s.cp_comm);
  EXPECT_NEAR(sim.step_time_s, fast.step_time_s, 0.01 * fast.step_time_s);
  EXPECT_NEAR(sim.breakdown_s.cp_comm, expected, 0.01 * expected);
  EXPECT_NEAR(slow.breakdown_s.cp_comm, 10 * expected, 1e-5 * expected);
  EXPECT_NEAR(fast_costs.cp_transfer_s, x, 1e-9 * x);
  EXPECT_DOUBLE_EQ(fast_costs.cp_attention_step_s, 0.0);
  // A lockstep meeting longer than the exchange sets its time.
  const Estimate lock = run(10e9, 5 * x, &lock_costs);
  EXPECT_NEAR(lock.breakdown_s.cp_comm, 5 * expected, 1e-5 * expected);
  // Where the profile timed the ring's own exchange in lockstep (lockstep.exchange_seconds), that
  // sets it instead of the all-reduce's meeting: at the block's bytes its time, 3x the swap's own;
  // at half the block's bytes the swap's own time of the block and the measured wait beyond it
  // (3x less 0.5x the block's swap: 2.5 swaps of the block on top of its own).
  auto ring = [&](double measured_bytes) {
    DeviceProfile p = cpu_profile(2, 2);
    for (double b : {1e3, 1e9}) p.collectives.push_back({"send-recv", 2, b, b / 10e9});
    p.lockstep.allreduce_bytes = 262144;
    p.lockstep.allreduce_s = 5 * x;
    p.lockstep.exchange_bytes = measured_bytes;
    p.lockstep.exchange_s = 3 * x;
    fit_device_profile(p);
    const Loaded<DeviceProfile> back = parse_device_profile_yaml(device_profile_yaml(p), "dev.yaml");
    EXPECT_TRUE(back.ok()) << back.diagnostics.to_string();
    EXPECT_DOUBLE_EQ(back.value->lockstep.exchange_s, 3 * x);
    return estimate(host_scenario(2, *back.value), l).breakdown_s.cp_comm;
  };
  const double at_block = ring(bytes), at_half = ring(bytes / 2);
  std::printf("Expectation: cp_comm %.6f s at the ring's meeting, %.6f s from half the block  Actual result: %.6f s, "
              "%.6f s\n", 3 * expected, 3.5 * expected, at_block, at_half);
  EXPECT_NEAR(at_block, 3 * expected, 1e-5 * expected);
  EXPECT_NEAR(at_half, 3.5 * expected, 1e-5 * expected);
  // Ranks outnumbering the cores: each exchange takes at least the measured hand-off among them.
  Layout l4 = l;
  l4.dp = 2;
  DeviceProfile shared = cpu_profile(2, 2);
  for (double b : {1e6, 1e9}) shared.collectives.push_back({"send-recv", 2, b, b / 10e9});
  shared.shared = {{4, 1, 40 * x, {}, ""}};
  fit_device_profile(shared);
  const Estimate four = estimate(host_scenario(4, shared), l4);
  const double expected4 = double(four.num_microbatches) * layers * 4 * 40 * x;
  std::printf("Expectation: dp 2 x cp 2 on 2 cores, cp_comm %.6f s at the hand-off  Actual result: %.6f s\n",
              expected4, four.breakdown_s.cp_comm);
  EXPECT_NEAR(four.breakdown_s.cp_comm, expected4, 1e-6 * expected4);
  // The datasheet's A100 hides the ring behind the blocks' attention.
  Scenario gpu = host_scenario(2, cpu_profile(2, 2));
  gpu.cluster.device_profile = nullptr;
  EXPECT_DOUBLE_EQ(estimate(gpu, l).breakdown_s.cp_comm, 0.0);
}

// Ranks outnumbering the cores (dp 2 x cp 2 on 2 cores): a ring's rank waits for its neighbour
// to get a core, the profile's hand-off beside pairs in lockstep, and that wait is its cp_comm;
// but the cores run the other ranks meanwhile, so the host's step takes only what a meeting of
// groups of cp costs it there (the profile's lockstep all-reduce on the shared cores). Expectation:
// cp_comm = N exchanges x the hand-off; a longer hand-off lengthens cp_comm, shortens the rank's
// compute by as much, and leaves the step; a dearer meeting adds N x its difference to the step;
// the simulator steps as the estimate. Ranks in lockstep already (tp 2 x cp 2) meet in the ring as
// in their all-reduces: N x the meeting, whatever the hand-off.
TEST(DeviceProfile, ContextRingWaitsOnSharedCoresAreTheRanksAndTheMeetingsTheHosts) {
  Layout l;
  l.dp = 2;
  l.cp = 2;
  l.mbs = 1;
  l.recompute = Recompute::None;
  const Estimate own = estimate(host_scenario(4, cpu_profile(2, 4)), l);  // a core each
  const double layers = host_scenario(4, cpu_profile(2, 2)).model.layers;
  const double n = double(own.num_microbatches) * layers * 4;  // exchanges a step
  const double unit = own.breakdown_s.compute / n;             // a rank's compute per exchange
  auto profile = [&](double handoff, double meeting) {
    DeviceProfile p = cpu_profile(2, 2);
    for (double b : {1e6, 1e9}) p.collectives.push_back({"send-recv", 2, b, b / 1e12});  // the copy: short
    SharedCoresTiming t{4, 1, 2 * handoff * unit, {{2, 262144, meeting * unit, 1.2, ""}}, ""};
    t.handoff_lockstep_s = handoff * unit;
    p.shared = {t};
    fit_device_profile(p);
    return host_scenario(4, p);
  };
  const Estimate a = estimate(profile(0.25, 0.05), l), b = estimate(profile(0.4, 0.05), l);
  const Estimate dear = estimate(profile(0.25, 0.1), l);
  std::printf("Expectation: cp_comm %.6f and %.6f s, steps equal; a dearer meeting +%.6f s  Actual result: "
              "%.6f and %.6f s, steps %.6f and %.6f s, +%.6f s\n",
              n * 0.25 * unit, n * 0.4 * unit, n * 0.05 * unit, a.breakdown_s.cp_comm, b.breakdown_s.cp_comm,
              a.step_time_s, b.step_time_s, dear.step_time_s - a.step_time_s);
  EXPECT_NEAR(a.breakdown_s.cp_comm, n * 0.25 * unit, 1e-9 * a.step_time_s);
  EXPECT_NEAR(b.breakdown_s.cp_comm, n * 0.4 * unit, 1e-9 * a.step_time_s);
  EXPECT_NEAR(b.step_time_s, a.step_time_s, 1e-9 * a.step_time_s);
  EXPECT_NEAR(a.breakdown_s.compute - b.breakdown_s.compute, n * 0.15 * unit, 1e-9 * a.step_time_s);
  EXPECT_NEAR(dear.step_time_s - a.step_time_s, n * 0.05 * unit, 1e-9 * a.step_time_s);
  // The rank's compute still takes at least its own time on a core.
  EXPECT_GT(a.breakdown_s.compute, own.breakdown_s.compute);
  // The simulator's stage stands for all four ranks: its ring is what the estimate left exposed.
  const StepSimulation sim = simulate_step(profile(0.25, 0.05), l);
  std::printf("Expectation: simulated step %.6f s  Actual result: %.6f s\n", a.step_time_s, sim.step_time_s);
  EXPECT_NEAR(sim.step_time_s, a.step_time_s, 0.01 * a.step_time_s);
  // Tensor-parallel ranks in lockstep: the ring's exchange is a meeting of theirs.
  Layout t = l;
  t.dp = 1;
  t.tp = 2;
  const Estimate lock = estimate(profile(0.25, 0.05), t), lock_b = estimate(profile(0.4, 0.05), t);
  const double nt = double(lock.num_microbatches) * layers * 4;
  std::printf("Expectation: tp 2 x cp 2 cp_comm %.6f s  Actual result: %.6f s (%.6f with the longer hand-off)\n",
              nt * 0.05 * unit, lock.breakdown_s.cp_comm, lock_b.breakdown_s.cp_comm);
  EXPECT_NEAR(lock.breakdown_s.cp_comm, nt * 0.05 * unit, 1e-9 * lock.step_time_s);
  EXPECT_DOUBLE_EQ(lock_b.breakdown_s.cp_comm, lock.breakdown_s.cp_comm);
}

// Sequence parallelism in capplan-train keeps the gathered layer-norm outputs for the weight
// gradients (Megatron-LM all-gathers them again in the backward, Korthikanti et al. 2022 Sec
// 4.2.2), so a profile prices the same tensor-parallel collectives with and without sp: each
// all-reduce's volume becomes an all-gather and a reduce-scatter. Without a profile sp adds one
// all-reduce's volume per layer's backward.
// tp 2 of one micro-batch without recompute, without and with sp.
std::pair<Layout, Layout> tp2_without_and_with_sp() {
  Layout l;
  l.tp = 2;
  l.mbs = 1;
  l.recompute = Recompute::None;
  Layout s = l;
  s.sp = true;
  return {l, s};
}

// A micro-batch's tensor-parallel collectives, forward and backward (the LM head's input gradient
// moves from the backward's all-reduce to a forward all-gather and a backward reduce-scatter
// under sp).
double tp_s(const StepCosts& c) {
  return c.chunks.front().tp_comm_forward_s + c.chunks.front().tp_comm_backward_s;
}

TEST(DeviceProfile, SequenceParallelCollectivesAreTheRuntimesOwn) {
  const auto [l, s] = tp2_without_and_with_sp();
  const Scenario sc = host_scenario(2, cpu_profile(2, 2));
  const double plain = tp_s(step_costs(sc, l)), seqpar = tp_s(step_costs(sc, s));
  Scenario datasheet = sc;
  datasheet.cluster.device_profile = nullptr;
  const double ds_plain = tp_s(step_costs(datasheet, l)), ds_seqpar = tp_s(step_costs(datasheet, s));
  std::printf("Expectation: a micro-batch's collectives equal with the profile, more under sp without it  "
              "Actual result: %.6f vs %.6f s; datasheet %.6f vs %.6f s\n", plain, seqpar, ds_plain, ds_seqpar);
  ASSERT_GT(plain, 0);
  EXPECT_NEAR(seqpar, plain, 1e-12 * plain);
  EXPECT_GT(ds_seqpar, ds_plain);
}

// Where the profile timed sequence parallelism's all-gather and reduce-scatter pair in lockstep
// (LockstepTiming::sp_s, capplan-train measure), sp's collectives take that time in place of the
// all-reduce's (LockstepTiming::allreduce_s), one pair for each all-reduce: a micro-batch's
// collectives grow linearly with the pair's time, as fast as the plain layout's grow with the
// all-reduce's, and equal them where the two times are equal. Both well above the collectives' own
// times, so that the measured meetings set them.
TEST(DeviceProfile, SequenceParallelPairTakesItsMeasuredLockstepTime) {
  const auto [l, s] = tp2_without_and_with_sp();
  auto with = [&](double allreduce_s, double sp_s, const Layout& ly) {
    DeviceProfile p = cpu_profile(2, 2);
    p.lockstep.allreduce_bytes = 4.0 * 2048 * 5120;
    p.lockstep.allreduce_s = allreduce_s;
    if (sp_s >= 0) {  // else not measured
      p.lockstep.sp_bytes = p.lockstep.allreduce_bytes / 2;
      p.lockstep.sp_s = sp_s;
    }
    return tp_s(step_costs(host_scenario(2, p), ly));
  };
  const double a = 0.05;  // s: far above a 40 MB all-reduce's own time on the profile's curves
  const double plain = with(a, a, l), plain2 = with(2 * a, a, l);
  const double sp1 = with(a, a, s), sp2 = with(a, 2 * a, s), sp3 = with(a, 3 * a, s);
  std::printf("Expectation: sp's collectives follow the pair's time as the plain layout's follow the all-reduce's  "
              "Actual result: plain %.4f -> %.4f s, sp %.4f -> %.4f -> %.4f s\n", plain, plain2, sp1, sp2, sp3);
  EXPECT_NEAR(sp1, plain, 1e-12 * plain);
  EXPECT_GT(sp2, sp1);
  EXPECT_NEAR(sp3 - sp2, sp2 - sp1, 1e-9 * sp3);
  EXPECT_NEAR(sp2 - sp1, plain2 - plain, 1e-9 * sp3);
  // The plain layout ignores the pair's time, and a profile without it prices sp as the plain one.
  EXPECT_NEAR(with(a, 3 * a, l), plain, 1e-12 * plain);
  EXPECT_NEAR(with(a, -1, s), plain, 1e-12 * plain);
  // The pair's timing reads back from the YAML; a bad one is refused naming its field.
  DeviceProfile p = cpu_profile(2, 2);
  p.lockstep.allreduce_bytes = 262144;
  p.lockstep.allreduce_s = 7.5e-5;
  p.lockstep.sp_bytes = 131072;
  p.lockstep.sp_s = 8.25e-5;
  const std::string text = device_profile_yaml(p);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(text, "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->lockstep.sp_bytes, 131072);
  EXPECT_EQ(q.value->lockstep.sp_s, 8.25e-5);
  expect_values_refused(text, "sp_seconds: ", {"-1", ".nan", "abc"}, "device_profile.lockstep.sp_seconds");
}

// The profile's round spread (RoundSpread) reads back; a profile written before it has none, and
// a spread that is no relative standard deviation (negative, not a number) is refused naming the
// field.
TEST(DeviceProfile, RoundSpreadReadsBackAndOldProfilesHaveNone) {
  DeviceProfile p = synthetic_profile();
  p.spread = {5, 0.012, 0.025, 0.08};
  const std::string text = device_profile_yaml(p);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(text, "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  EXPECT_EQ(q.value->spread.rounds, 5);
  EXPECT_EQ(q.value->spread.gemms, 0.012);
  EXPECT_EQ(q.value->spread.kernels, 0.025);
  EXPECT_EQ(q.value->spread.collectives, 0.08);
  const Loaded<DeviceProfile> r = parse_device_profile_yaml(without_line(text, "  round_spread:"), "old.yaml");
  ASSERT_TRUE(r.ok()) << r.diagnostics.to_string();
  EXPECT_EQ(r.value->spread.rounds, 0);
  EXPECT_EQ(r.value->spread.gemms, 0);
  expect_values_refused(text, "gemms: ", {"-0.1", ".nan", "abc"}, "device_profile.round_spread.gemms",
                        text.find("  round_spread:"));
}

// The cores' cache-line latency: the samples' median, least and most, how many lie more than
// twofold from the median, with the samples that are not finite or not positive left out (ranks
// that did not measure); it reads back from the YAML, an old profile has none, and a bad value
// is refused naming its field.
TEST(DeviceProfile, CoreLatencyReadsBackAndOldProfilesHaveNone) {
  const double nan = std::nan("");
  const CoreLatency c = summarize_core_latency({40, nan, 160, 42, 0, 44, 38, -5, 170});
  EXPECT_EQ(c.samples, 6);
  EXPECT_EQ(c.median_ns, 43);  // of 38 40 42 44 160 170
  EXPECT_EQ(c.min_ns, 38);
  EXPECT_EQ(c.max_ns, 170);
  EXPECT_EQ(c.apart, 2);  // 160 and 170 are above 2 x 43
  EXPECT_EQ(summarize_core_latency({nan, 0}).samples, 0);
  // Moved: more than twofold apart, either way, both measured.
  EXPECT_TRUE(core_latency_moved(40, 81));
  EXPECT_TRUE(core_latency_moved(81, 40));
  EXPECT_FALSE(core_latency_moved(40, 80));
  EXPECT_FALSE(core_latency_moved(40, nan));
  EXPECT_FALSE(core_latency_moved(0, 160));
  DeviceProfile p = synthetic_profile();
  p.core_latency = c;
  p.core_latency.lockstep_before_ns = 41.5;
  p.core_latency.lockstep_after_ns = 165.25;
  const std::string text = device_profile_yaml(p);
  const Loaded<DeviceProfile> q = parse_device_profile_yaml(text, "dev.yaml");
  ASSERT_TRUE(q.ok()) << q.diagnostics.to_string();
  const CoreLatency& r = q.value->core_latency;
  EXPECT_EQ(r.samples, 6);
  EXPECT_EQ(r.median_ns, 43);
  EXPECT_EQ(r.min_ns, 38);
  EXPECT_EQ(r.max_ns, 170);
  EXPECT_EQ(r.apart, 2);
  EXPECT_EQ(r.lockstep_before_ns, 41.5);
  EXPECT_EQ(r.lockstep_after_ns, 165.25);
  const Loaded<DeviceProfile> o = parse_device_profile_yaml(without_line(text, "  core_latency:"), "old.yaml");
  ASSERT_TRUE(o.ok()) << o.diagnostics.to_string();
  EXPECT_EQ(o.value->core_latency.samples, 0);
  expect_values_refused(text, "median_ns: ", {"-1", "0", ".nan", "abc"}, "device_profile.core_latency.median_ns");
}

// With a device profile the band is the profile's own: its round spread on the terms each kind
// of timing prices (the GEMMs and the rest of the passes together, the host's; the collectives
// apart) and the residual in quadrature: the framework's for a GPU's profile, the local model's
// measured 8.3 % for CPU ranks. By hand from the estimate's own terms.
TEST(DeviceProfile, TheBandOfAProfiledEstimateIsTheProfilesSpreadAndResidual) {
  Layout l;
  l.dp = 2;
  l.tp = 2;
  l.pp = 2;
  l.mbs = 1;
  auto by_hand = [](const Estimate& e, const RoundSpread& s, double residual) {
    const TimeBreakdown& b = e.breakdown_s;
    const double passes = b.compute + b.recompute, gemm = std::min(e.gemm_s, passes), g = gemm / passes;
    const double host = (gemm + b.bubble * g) * s.gemms +
                        (passes - gemm + b.bubble * (1 - g) + b.optimizer + b.offload) * s.kernels;
    const double net = (b.tp_comm + b.pp_comm + b.dp_comm + b.ep_comm + b.cp_comm) * s.collectives;
    return 1.2816 * std::sqrt(host * host + net * net + std::pow(e.step_time_s * residual, 2));
  };
  Scenario sc = gpt3_13b_on_a_node();
  DeviceProfile gpu = synthetic_profile();
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(gpu);
  const Estimate none = estimate(sc, l);
  const double residual = sc.training.framework.residual_spread;
  ASSERT_GT(residual, 0);
  EXPECT_NEAR(none.step_time_s_p90 - none.step_time_s, 1.2816 * residual * none.step_time_s,
              1e-9 * none.step_time_s);  // no spread recorded: the residual alone
  gpu.spread = {5, 0.05, 0.08, 0.20};
  sc.cluster.device_profile = std::make_shared<const DeviceProfile>(gpu);
  const Estimate noisy = estimate(sc, l);
  const double half = by_hand(noisy, gpu.spread, residual);
  std::printf("Expectation: the band widens with the profile's spread, as by hand  Actual: %.4f-%.4f s around %.4f "
              "(by hand +-%.4f; %.4f-%.4f without the spread)\n",
              noisy.step_time_s_p10, noisy.step_time_s_p90, noisy.step_time_s, half, none.step_time_s_p10,
              none.step_time_s_p90);
  EXPECT_NEAR(noisy.step_time_s_p90 - noisy.step_time_s, half, 1e-9 * noisy.step_time_s);
  EXPECT_NEAR(noisy.step_time_s - noisy.step_time_s_p10, half, 1e-9 * noisy.step_time_s);
  EXPECT_GT(noisy.step_time_s_p90 - noisy.step_time_s_p10, none.step_time_s_p90 - none.step_time_s_p10);
  EXPECT_NEAR(noisy.days_to_train_p90 / noisy.days_to_train, noisy.step_time_s_p90 / noisy.step_time_s, 1e-12);
  // Independently of the formula: a host whose GEMMs and kernels all run s slower (every timing,
  // the fitted line and the bandwidth with them) lengthens the step by what the band, with
  // those two spreads at s and no residual, puts at one standard deviation (first order).
  const double sd = 0.05;
  Scenario quiet = sc;
  quiet.training.framework.residual_spread = 0;
  DeviceProfile host_noise = synthetic_profile();
  host_noise.spread = {5, sd, sd, 0};
  quiet.cluster.device_profile = std::make_shared<const DeviceProfile>(host_noise);
  const Estimate banded = estimate(quiet, l);
  DeviceProfile slower = host_noise;
  for (GemmTiming& g : slower.gemms) g.seconds *= 1 + sd;
  for (KernelTiming& k : slower.kernels) k.seconds *= 1 + sd;
  slower.gemm_peak_gflops /= 1 + sd;
  slower.gemm_overhead_us *= 1 + sd;
  slower.memory_gbyte_per_s /= 1 + sd;
  Scenario slow_sc = quiet;
  slow_sc.cluster.device_profile = std::make_shared<const DeviceProfile>(slower);
  const double grown = estimate(slow_sc, l).step_time_s - banded.step_time_s;
  const double one_sd = (banded.step_time_s_p90 - banded.step_time_s) / 1.2816;
  std::printf("Expectation: the host %.0f %% slower lengthens the step by the band's standard deviation  Actual: "
              "%.4f s against %.4f s\n", 100 * sd, grown, one_sd);
  EXPECT_NEAR(grown, one_sd, 0.05 * one_sd);
  // CPU ranks: the local model's residual in place of the framework's.
  DeviceProfile cpu = cpu_profile(2, 2);
  cpu.spread = gpu.spread;
  const Estimate local = estimate(host_scenario(8, cpu), l);
  EXPECT_NEAR(local.step_time_s_p90 - local.step_time_s, by_hand(local, cpu.spread, 0.083),
              1e-9 * local.step_time_s);
  EXPECT_EQ(band_spreads(host_scenario(8, cpu)).framework, 0.083);
}

}  // namespace
}  // namespace capplan
