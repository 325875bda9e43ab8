// The launch library (runtime/launch.h): scale-down keeps every planner layout valid, the mpirun
// argument vector, real child processes (streaming, exit status, signals, cancel), the metrics
// tail-reader on a growing file, the measured medians, and the run record written on success,
// failure and cancel. No MPI here: the end-to-end run through mpirun is test_launch_e2e.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "planner/plan_io.h"
#include "planner/search.h"
#include "planner/spec_io.h"
#include "support/test_files.h"
#include "launch/launch.h"
#include "launch/measure_profile.h"

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;

// A fixed machine, so that the tests do not depend on this one.
LocalMachine fake_machine() {
  LocalMachine m;
  m.cores = 2;
  m.ram_bytes = 16.0 * 1024 * 1024 * 1024;
  m.available_bytes = m.ram_bytes;
  m.gemm_peak_gflops = 50;
  m.gemm_peak_source = "stated for the test";
  m.memory_gbyte_per_s = 10;
  m.memory_source = "stated for the test";
  return m;
}

Scenario scenario_for(const std::string& model, int gpus, int64_t gbs, int seq = 0) {
  Scenario s;
  auto m = load_model(model);
  EXPECT_TRUE(m.ok()) << m.diagnostics.to_string();
  s.model = *m.value;
  auto c = load_cluster("p4d.24xlarge");
  EXPECT_TRUE(c.ok()) << c.diagnostics.to_string();
  s.cluster = *c.value;
  s.nodes = (gpus + s.cluster.gpus_per_node - 1) / s.cluster.gpus_per_node;
  s.gpus = gpus;
  s.training.gbs = gbs;
  s.training.seq_len = seq;
  return s;
}

std::string temp_dir(const std::string& name) { return capplan::test::scratch_dir(name).string(); }
using capplan::test::read_text;

// The scaled layout keeps the knobs, satisfies check_layout, and the model is small.
void expect_scaled_ok(const Scenario& original, const Layout& l, const std::string& what) {
  const ClusterSpec local = local_cluster_spec(fake_machine(), l.gpus());
  const ScaledRun r = scale_down(original, l, local);
  SCOPED_TRACE(what);
  const auto why = check_layout(r.scenario, r.layout);
  EXPECT_FALSE(why.has_value()) << *why;
  EXPECT_EQ(r.layout.dp, l.dp);
  EXPECT_EQ(r.layout.tp, l.tp);
  EXPECT_EQ(r.layout.pp, l.pp);
  EXPECT_EQ(r.layout.vp, l.vp);
  EXPECT_EQ(r.layout.zero, l.zero);
  EXPECT_EQ(r.layout.recompute, l.recompute);
  EXPECT_EQ(r.layout.offload, l.offload);
  EXPECT_EQ(r.layout.sp, l.sp);
  EXPECT_EQ(r.layout.order, l.order);
  EXPECT_EQ(r.layout.schedule, l.schedule);
  const ModelSpec& m = r.scenario.model;
  EXPECT_EQ(m.layers % (l.pp * l.vp), 0);
  EXPECT_EQ(m.heads % l.tp, 0);
  EXPECT_EQ(m.kv_heads_or_default() % l.tp, 0);
  EXPECT_EQ(m.heads % m.kv_heads_or_default(), 0);
  EXPECT_EQ(m.hidden % m.heads, 0);
  EXPECT_EQ(m.vocab % l.tp, 0);
  EXPECT_EQ(m.ffn_hidden_or_default() % l.tp, 0);
  EXPECT_LE(r.scenario.seq_len(), 64 + l.tp);
  if (l.sp) {
    EXPECT_EQ(r.scenario.seq_len() % l.tp, 0);
  }
  // Grouped-query attention stays grouped.
  if (original.model.kv_heads_or_default() < original.model.heads) {
    EXPECT_LT(m.kv_heads_or_default(), m.heads);
  }
  const int64_t micro = r.layout.num_microbatches(r.scenario.training.gbs);
  const int64_t orig_micro = l.num_microbatches(original.training.gbs);
  ASSERT_GT(micro, 0);
  EXPECT_GE(micro, std::min<int64_t>(orig_micro, l.pp));
  EXPECT_LE(micro, orig_micro);
  if (l.schedule == Schedule::Interleaved) {
    EXPECT_EQ(micro % l.pp, 0);
  }
  EXPECT_EQ(r.scenario.training.precision, Precision::Fp32);
  EXPECT_EQ(r.scenario.total_gpus(), l.gpus());
  // Small: a scaled rank's whole predicted memory is well under 100 MiB (a CPU rank keeps no GPU
  // runtime's reservation).
  EXPECT_TRUE(r.scenario.cluster.gpu.cpu_rank);
  const Estimate e = estimate(r.scenario, r.layout);
  EXPECT_LT(e.memory_per_gpu_bytes.total, 100.0 * 1024 * 1024) << "model " << m.layers << "x" << m.hidden;
  EXPECT_FALSE(r.changes.empty());
}

// Expectation: for every valid layout of 8 and 16 GPUs of three model families (dense MHA,
// grouped-query, small), with every schedule and knob combination tried, the scaled layout is
// still valid and keeps every knob.
TEST(LaunchScaleDown, KeepsEveryEnumeratedLayoutValid) {
  int checked = 0;
  for (const std::string model : {"gpt3-175b", "llama2-70b", "gpt2-124m"}) {
    for (const int gpus : {1, 2, 8, 16}) {
      const Scenario s = scenario_for(model, gpus, 512);
      for (int tp = 1; tp <= gpus; tp *= 2) {
        for (int pp = 1; tp * pp <= gpus; pp *= 2) {
          if (gpus % (tp * pp) != 0) continue;
          const int dp = gpus / (tp * pp);
          for (const Schedule sched : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved}) {
            for (const int vp : {1, 2, 3}) {
              for (const bool sp : {false, true}) {
                Layout l;
                l.dp = dp, l.tp = tp, l.pp = pp, l.vp = vp, l.mbs = 2, l.schedule = sched;
                l.sp = sp;
                l.zero = dp > 1 ? 1 : 0;
                l.recompute = sp ? Recompute::Selective : Recompute::Full;
                l.offload = vp == 2;
                l.order = sp ? "PDT" : "DPT";
                if (check_layout(s, l)) continue;  // not a layout the planner would emit
                expect_scaled_ok(s, l, model + " " + std::to_string(dp) + "x" + std::to_string(tp) +
                                           "x" + std::to_string(pp) + " vp " + std::to_string(vp) +
                                           " " + to_string(sched) + (sp ? " sp" : ""));
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  std::printf("Expectation: every valid layout stays valid after scale-down. Actual: %d layouts checked\n",
              checked);
  EXPECT_GT(checked, 50);
}

// Expectation: the layouts the search itself ranks best for GPT-3 175B on 8 p4d nodes (64 GPUs)
// scale down to valid layouts.
TEST(LaunchScaleDown, KeepsSearchCandidatesValid) {
  const Scenario s = scenario_for("gpt3-175b", 64, 1536);
  SearchOptions o;
  o.nodes_min = o.nodes_max = 8;
  o.top = 30;
  o.include_infeasible = true;
  o.threads = 1;
  const SearchResult r = search(s, o);
  ASSERT_FALSE(r.candidates.empty());
  for (const Estimate& e : r.candidates) {
    Scenario es = s;
    es.nodes = 8;
    es.gpus = 0;
    expect_scaled_ok(es, e.layout, "search candidate");
  }
}

// Expectation: GPT-3 175B on tp 8, pp 8, vp 2, interleaved, gbs 1536 with dp 2 and mbs 1 (768
// micro-batches) becomes 16 layers (pp 8 x vp 2 x 1), 8 heads, 16 micro-batches (capped at 2 pp,
// a multiple of pp), gbs 2 x 16 = 32; and the changes say so.
TEST(LaunchScaleDown, Gpt3OnLargeLayoutByHand) {
  const Scenario s = scenario_for("gpt3-175b", 128, 1536);
  Layout l;
  l.dp = 2, l.tp = 8, l.pp = 8, l.vp = 2, l.mbs = 1, l.schedule = Schedule::Interleaved;
  ASSERT_FALSE(check_layout(s, l).has_value());
  const ScaledRun r = scale_down(s, l, local_cluster_spec(fake_machine(), 128));
  EXPECT_EQ(r.scenario.model.layers, 16);
  EXPECT_EQ(r.scenario.model.heads, 8);
  EXPECT_EQ(r.scenario.model.hidden, 128);  // 8 heads x head_dim 16
  EXPECT_EQ(r.scenario.model.vocab, 256);
  EXPECT_EQ(r.scenario.seq_len(), 64);
  EXPECT_EQ(r.layout.num_microbatches(r.scenario.training.gbs), 16);
  EXPECT_EQ(r.scenario.training.gbs, 32);
  std::string all;
  for (const auto& c : r.changes) all += c + "\n";
  EXPECT_NE(all.find("layers 96 -> 16"), std::string::npos) << all;
  EXPECT_NE(all.find("gbs 1536 -> 32"), std::string::npos) << all;
  EXPECT_NE(all.find("precision bf16 -> fp32"), std::string::npos) << all;
  EXPECT_NE(all.find("kept: dp 2, tp 8, pp 8, vp 2, schedule interleaved"), std::string::npos) << all;
}

// Expectation: the model YAML reads back through the planner's loader as the same model.
TEST(LaunchScaleDown, ModelYamlRoundTrips) {
  const Scenario s = scenario_for("llama2-70b", 8, 64);
  Layout l;
  l.dp = 1, l.tp = 4, l.pp = 2;
  const ScaledRun r = scale_down(s, l, local_cluster_spec(fake_machine(), 8));
  const auto back = parse_model_yaml(model_yaml(r.scenario.model), "model.yaml");
  ASSERT_TRUE(back.ok()) << back.diagnostics.to_string();
  const ModelSpec& a = r.scenario.model;
  const ModelSpec& b = *back.value;
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads_or_default(), b.kv_heads_or_default());
  EXPECT_EQ(a.ffn_hidden_or_default(), b.ffn_hidden_or_default());
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
}

TEST(LaunchLocalCluster, SplitsTheMachineOverRanks) {
  const ClusterSpec c = local_cluster_spec(fake_machine(), 4);
  EXPECT_EQ(c.gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(c.gpu.memory_gib, 4.0);                 // 16 GiB / 4
  EXPECT_DOUBLE_EQ(c.gpu.peak_tflops_fp32, 50.0 / 4 / 1000);  // 50 GFLOP/s / 4 ranks
  EXPECT_DOUBLE_EQ(c.intra_node_gbyte_per_s, 10.0 / 2 / 4);
  Diagnostics d;
  validate_cluster(c, "<local>", d);
  EXPECT_FALSE(d.has_errors()) << d.to_string();
}

// Expectation: the argument vector, element by element; --offload and --sp only when on.
TEST(LaunchArgv, ExactVector) {
  TrainCommand c;
  c.mpirun = "/usr/bin/mpirun";
  c.train_binary = "/b/capplan-train";
  c.as_root = true;
  TrainOptions& o = c.options;
  o.model = "/r/model.yaml";
  o.layout.dp = 2, o.layout.tp = 2, o.layout.pp = 2, o.layout.vp = 1, o.layout.mbs = 1;
  o.layout.zero = 1, o.layout.recompute = Recompute::Selective, o.layout.sp = true;
  o.layout.order = "TPD", o.layout.schedule = Schedule::GPipe;
  o.gbs = 8, o.steps = 3, o.seed = 7, o.checkpoint_dir = "/r/ck", o.checkpoint_every = 3;
  o.resume = "never", o.metrics = "/r/metrics.jsonl", o.threads = 1;
  const std::vector<std::string> want = {
      "/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "8",
      "/b/capplan-train", "--model", "/r/model.yaml", "--dp", "2", "--tp", "2", "--pp", "2",
      "--vp", "1", "--mbs", "1", "--gbs", "8", "--zero", "1", "--recompute", "selective", "--sp",
      "--order", "TPD", "--schedule", "gpipe", "--steps", "3", "--seed", "7", "--data",
      "synthetic", "--checkpoint-dir", "/r/ck", "--checkpoint-every", "3", "--resume", "never",
      "--metrics", "/r/metrics.jsonl", "--threads", "1"};
  EXPECT_EQ(build_train_argv(c), want);
  c.as_root = false;
  o.layout.sp = false;
  o.layout.offload = true;
  const auto v = build_train_argv(c);
  EXPECT_EQ(std::count(v.begin(), v.end(), "--allow-run-as-root"), 0);
  EXPECT_EQ(std::count(v.begin(), v.end(), "--sp"), 0);
  EXPECT_EQ(std::count(v.begin(), v.end(), "--offload"), 1);
}

// Expectation: a plan's cp and ep reach capplan-train as --cp and --ep, and the ranks are
// dp * tp * pp * cp = 2 * 1 * 1 * 2 = 4 (ep lives inside dp * cp).
TEST(LaunchArgv, ContextAndExpertAxesPassThrough) {
  TrainCommand c;
  c.mpirun = "/usr/bin/mpirun";
  c.train_binary = "/b/capplan-train";
  c.options.model = "/r/moe.yaml";
  c.options.layout.dp = 2, c.options.layout.cp = 2, c.options.layout.ep = 4;
  c.options.moe_aux_loss_coeff = 0.001;
  const std::vector<std::string> v = build_train_argv(c);
  const auto at = [&](const std::string& f) { return std::find(v.begin(), v.end(), f); };
  ASSERT_NE(at("-np"), v.end());
  EXPECT_EQ(*(at("-np") + 1), "4");
  ASSERT_NE(at("--cp"), v.end());
  EXPECT_EQ(*(at("--cp") + 1), "2");
  ASSERT_NE(at("--ep"), v.end());
  EXPECT_EQ(*(at("--ep") + 1), "4");
  ASSERT_NE(at("--moe-aux-loss-coeff"), v.end());
  EXPECT_EQ(*(at("--moe-aux-loss-coeff") + 1), "0.001");
  c.options.layout.cp = 1, c.options.layout.ep = 1;  // the defaults are not written
  const std::vector<std::string> plain = build_train_argv(c);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--cp"), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--ep"), 0);
}

// Expectation: shrinking dp 16 tp 8 pp 4 cp 8 ep 16 (4,096 ranks) to 8 ranks keeps at most 2 of
// tp, pp and cp each (2 * 2 * 2 = 8, so dp 1), and ep becomes gcd(16, dp * cp = 2) = 2, still
// inside dp * cp and a divisor of the experts.
TEST(LaunchScaleDown, ShrinkKeepsContextAndExpertInsideTheRanks) {
  Layout l;
  l.dp = 16, l.tp = 8, l.pp = 4, l.cp = 8, l.ep = 16;
  const ShrunkLayout s = shrink_layout(l, 8);
  EXPECT_EQ(s.layout.gpus(), 8);
  EXPECT_EQ(s.layout.cp, 2);
  EXPECT_EQ(s.layout.dp, 1);
  EXPECT_EQ(s.layout.ep, 2);
  ASSERT_FALSE(s.changes.empty());
  EXPECT_EQ(s.changes[0], "layout dp 16 tp 8 pp 4 cp 8 ep 16 (4096 ranks) -> dp 1 tp 2 pp 2 cp 2 ep 2 "
                          "(8 ranks): at most 8 ranks here");
}

// Expectation: scaling down an MoE model on dp 2 x cp 3 with ep 2 keeps a valid layout: the
// sequence a multiple of 2 * cp = 6 (64 -> 66), 64 experts -> 8 (a multiple of ep), top_k kept
// (<= experts), the experts' width a multiple of tp; the kept knobs name cp and ep.
TEST(LaunchScaleDown, MixtureOfExpertsOnContextParallelLayout) {
  Scenario s = scenario_for("llama2-70b", 12, 64);
  s.model.moe.experts = 64;
  s.model.moe.top_k = 6;
  s.model.moe.expert_ffn_hidden = 1408;
  Layout l;
  l.dp = 2, l.tp = 2, l.cp = 3, l.ep = 2;
  const ScaledRun r = scale_down(s, l, local_cluster_spec(fake_machine(), 12));
  EXPECT_EQ(r.scenario.seq_len() % 6, 0);
  EXPECT_EQ(r.scenario.seq_len(), 66);
  EXPECT_EQ(r.scenario.model.moe.experts, 8);
  EXPECT_EQ(r.scenario.model.moe.top_k, 6);
  EXPECT_EQ(r.scenario.model.moe.expert_ffn_hidden % 2, 0);
  EXPECT_FALSE(check_layout(r.scenario, r.layout).has_value())
      << check_layout(r.scenario, r.layout).value_or("");
  std::string all;
  for (const auto& c : r.changes) all += c + "\n";
  EXPECT_NE(all.find("moe.experts 64 -> 8"), std::string::npos) << all;
  EXPECT_NE(all.find(", cp 3, ep 2"), std::string::npos) << all;
}

// Expectation: DeepSeek-V3's latent attention is scaled down to the plain multi-head attention
// capplan-train runs (its heads, hidden / heads wide), the change named; the layout stays valid.
TEST(LaunchScaleDown, LatentAttentionBecomesTheAttentionTheRuntimeRuns) {
  const Scenario s = scenario_for("deepseek-v3-671b", 4, 64);
  ASSERT_TRUE(s.model.mla.enabled());
  Layout l;
  l.dp = 2, l.tp = 2, l.ep = 2;
  const ScaledRun r = scale_down(s, l, local_cluster_spec(fake_machine(), 4));
  EXPECT_FALSE(r.scenario.model.mla.enabled());
  EXPECT_EQ(r.scenario.model.hidden % r.scenario.model.heads, 0);
  EXPECT_FALSE(check_layout(r.scenario, r.layout).has_value())
      << check_layout(r.scenario, r.layout).value_or("");
  std::string all;
  for (const auto& c : r.changes) all += c + "\n";
  EXPECT_NE(all.find("attention: multi-head latent attention (kv_lora_rank 512) -> multi-head attention"),
            std::string::npos) << all;
  // Its multi-token prediction module goes too (capplan-train trains the next-token loss only).
  ASSERT_EQ(s.model.mtp_layers, 1);
  EXPECT_EQ(r.scenario.model.mtp_layers, 0);
  EXPECT_NE(all.find("multi-token prediction: 1 module -> none"), std::string::npos) << all;
}

// Expectation: a window or chunks shorter than the scaled-down sequence go (capplan-train's
// attention has neither), the change named; a span the short sequence fits in stays (gpt-oss's
// window of 128 at 64 tokens), and so does its layout's validity.
TEST(LaunchScaleDown, ALocalSpanShorterThanTheSequenceAttendsToAllOfIt) {
  Scenario s = scenario_for("gpt-oss-120b", 8, 64);
  ASSERT_EQ(s.model.sliding_window, 128);
  Layout l;
  l.dp = 2, l.ep = 2;
  ScaledRun kept = scale_down(s, l, local_cluster_spec(fake_machine(), 2));
  EXPECT_EQ(kept.scenario.model.sliding_window, 128);
  std::string all;
  for (const auto& c : kept.changes) all += c + "\n";
  EXPECT_EQ(all.find("attention: a window"), std::string::npos) << all;
  s.model.sliding_window = 16;
  const ScaledRun r = scale_down(s, l, local_cluster_spec(fake_machine(), 2));
  EXPECT_EQ(r.scenario.model.sliding_window, 0);
  EXPECT_EQ(r.scenario.model.global_every, 0);
  EXPECT_FALSE(check_layout(r.scenario, r.layout).has_value()) << check_layout(r.scenario, r.layout).value_or("");
  all.clear();
  for (const auto& c : r.changes) all += c + "\n";
  EXPECT_NE(all.find("attention: a window of 16 tokens -> the whole sequence of 64, which capplan-train runs"),
            std::string::npos) << all;
  s.model.sliding_window = 0;
  s.model.attention_chunk = 32;
  const ScaledRun chunked = scale_down(s, l, local_cluster_spec(fake_machine(), 2));
  EXPECT_EQ(chunked.scenario.model.attention_chunk, 0);
}

void make_executable(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "#!/bin/sh\n";
  fs::permissions(path, fs::perms::owner_all);
}

// Expectation: capplan-train is found side by side with capplan (the build tree's bin/, or
// installed), else at the build's hint; $CAPPLAN_TRAIN wins over both; nothing found -> empty.
// The shared-core runs of `capplan profile --measure` take twice and four times the host's cores
// in ranks, as many as three quarters of the available memory holds at the first run's largest
// resident set a rank, and only counts above the cores.
TEST(MeasureSharedCores, RankCountsBoundedByTheAvailableMemory) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  using V = std::vector<int>;
  EXPECT_EQ(capplan::rt::shared_core_ranks(2, 0.1 * gib, 20 * gib), (V{4, 8}));
  EXPECT_EQ(capplan::rt::shared_core_ranks(2, 0, 0), (V{4, 8}));  // not known: both
  // 96 cores, 1 GiB a rank, 200 GiB available: 150 ranks fit, so 150 in place of 192 and 384.
  EXPECT_EQ(capplan::rt::shared_core_ranks(96, gib, 200 * gib), (V{150}));
  // 96 cores, 1 GiB a rank, 300 GiB: 192, then 225 in place of 384.
  EXPECT_EQ(capplan::rt::shared_core_ranks(96, gib, 300 * gib), (V{192, 225}));
  // Not even cores + 1 ranks fit: none.
  EXPECT_TRUE(capplan::rt::shared_core_ranks(8, 4 * gib, 40 * gib).empty());
  EXPECT_EQ(capplan::rt::shared_core_ranks(0, 0, 0), (V{2, 4}));  // cores unknown: one
}

TEST(LaunchArgv, LocatesTheTrainerNextToCapplan) {
  const std::string dir = temp_dir("locate");
  ::unsetenv("CAPPLAN_TRAIN");
  make_executable(dir + "/build/bin/capplan");
  make_executable(dir + "/build/bin/capplan-train");
  EXPECT_EQ(locate_train_binary(dir + "/build/bin/capplan"),
            fs::canonical(dir + "/build/bin/capplan-train").string());
  make_executable(dir + "/bin/capplan");
  make_executable(dir + "/bin/capplan-train");
  EXPECT_EQ(locate_train_binary(dir + "/bin/capplan"), fs::canonical(dir + "/bin/capplan-train").string());
  EXPECT_EQ(locate_train_binary(dir + "/elsewhere/capplan", dir + "/bin/capplan-train"),
            dir + "/bin/capplan-train");  // the build's hint
  ::setenv("CAPPLAN_TRAIN", (dir + "/bin/capplan-train").c_str(), 1);
  EXPECT_EQ(locate_train_binary(dir + "/build/bin/capplan"), dir + "/bin/capplan-train");
  ::setenv("CAPPLAN_TRAIN", (dir + "/missing").c_str(), 1);
  EXPECT_EQ(locate_train_binary(dir + "/build/bin/capplan"), "");
  ::unsetenv("CAPPLAN_TRAIN");
  fs::remove_all(dir);
}

TEST(LaunchArgv, ShellQuoteForDisplay) {
  EXPECT_EQ(shell_quote({"a", "b c", "it's", "", "x=1,y/2"}), "a 'b c' 'it'\\''s' '' x=1,y/2");
}

// ---------------------------------------------------------------- processes

struct Captured {
  std::vector<std::string> out, err;
  OutputLineFn fn() {
    return [this](OutputStream s, const std::string& line) {
      (s == OutputStream::Stdout ? out : err).push_back(line);
    };
  }
};

// Expectation: stdout and stderr lines arrive separately and in order, an unterminated last
// line too, and the exit status is the child's.
TEST(LaunchProcess, StreamsLinesAndExitStatus) {
  Captured c;
  const ProcessResult r = run_process(
      {"/bin/sh", "-c", "echo one; echo err1 >&2; echo two; printf partial; exit 3"}, {}, c.fn());
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_FALSE(r.succeeded());
  EXPECT_EQ(c.out, (std::vector<std::string>{"one", "two", "partial"}));
  EXPECT_EQ(c.err, (std::vector<std::string>{"err1"}));
  EXPECT_EQ(r.describe(), "exit status 3");
}

TEST(LaunchProcess, EnvironmentWorkingDirAndPathLookup) {
  const std::string dir = temp_dir("wd");
  Captured c;
  ProcessOptions o;
  o.working_dir = dir;
  o.env = {"CAPPLAN_TEST_VALUE=hello world"};
  const ProcessResult r = run_process({"sh", "-c", "echo \"$CAPPLAN_TEST_VALUE\"; pwd"}, o, c.fn());
  ASSERT_TRUE(r.succeeded()) << r.describe();
  ASSERT_EQ(c.out.size(), 2u);
  EXPECT_EQ(c.out[0], "hello world");
  EXPECT_EQ(fs::canonical(c.out[1]), fs::canonical(dir));
  fs::remove_all(dir);
}

// The ranks' shared-memory transport (launch_process.h): the single copy where a forked sibling
// can read another's memory (checked here independently with a pipe-synchronised pair), the
// copy-in/copy-out setting where it cannot, and the user's own choice always kept.
TEST(LaunchProcess, SingleCopyTransportWhereSiblingsMayReadEachOther) {
  // An independent sibling read: A writes a word to its own memory and waits; B reads it.
  static volatile int word = 0;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t a = ::fork();
  ASSERT_GE(a, 0);
  if (a == 0) {
    word = 4242;
    const char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const pid_t b = ::fork();
  ASSERT_GE(b, 0);
  if (b == 0) {
    int got = 0;
    struct iovec local = {&got, sizeof got};
    struct iovec remote = {const_cast<int*>(&word), sizeof got};
    ::_exit(::process_vm_readv(a, &local, 1, &remote, 1, 0) == ssize_t(sizeof got) && got == 4242 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(b, &status, 0), b);
  ::kill(a, SIGKILL);
  ::waitpid(a, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  const bool allowed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const char* users = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
  const std::string saved = users ? users : "";
  ::unsetenv("OMPI_MCA_btl_vader_single_copy_mechanism");
  std::printf("Expectation: single copy %s here  Actual result: %s\n", allowed ? "allowed" : "refused",
              single_copy_works() ? "allowed" : "refused");
  EXPECT_EQ(single_copy_works(), allowed);
  const std::vector<std::string> env = mpi_transport_env();
  if (allowed)
    EXPECT_TRUE(env.empty());
  else
    EXPECT_EQ(env, std::vector<std::string>{"OMPI_MCA_btl_vader_single_copy_mechanism=none"});
  // A mechanism the user set is theirs: nothing is added.
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  EXPECT_TRUE(mpi_transport_env().empty());
  if (users)
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", saved.c_str(), 1);
  else
    ::unsetenv("OMPI_MCA_btl_vader_single_copy_mechanism");
}

TEST(LaunchProcess, MissingProgramIsReportedNotStarted) {
  const ProcessResult r = run_process({"/nonexistent/capplan-train"}, {}, {});
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("/nonexistent/capplan-train"), std::string::npos) << r.error;
  const ProcessResult r2 = run_process({"capplan-no-such-program-xyz"}, {}, {});
  EXPECT_FALSE(r2.started);
  EXPECT_NE(r2.error.find("not found"), std::string::npos) << r2.error;
  EXPECT_EQ(find_executable("capplan-no-such-program-xyz"), "");
  EXPECT_FALSE(find_executable("sh").empty());
}

TEST(LaunchProcess, KilledBySignalIsReported) {
  const ProcessResult r = run_process({"/bin/sh", "-c", "kill -KILL $$"}, {}, {});
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_NE(r.describe().find("SIGKILL"), std::string::npos);
}

bool process_gone(pid_t pid) {
  // Gone, or a zombie waiting for a reaper that is not us.
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);
  const size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] == 'Z';
}

// Expectation: a child that ignores SIGTERM, and the grandchild it started, are both ended by
// the cancel (SIGTERM to the group, then SIGKILL after the grace period); the result says
// cancelled. Without the SIGKILL the child would sleep for 60 s.
TEST(LaunchProcess, CancelEndsTheWholeProcessGroup) {
  std::atomic<bool> cancel{false};
  pid_t grandchild = 0;
  ProcessOptions o;
  o.kill_grace_s = 0.3;
  int ticks = 0;
  o.on_tick = [&] { ++ticks; };
  o.tick_s = 0.01;
  const auto r = run_process(
      {"/bin/sh", "-c", "trap '' TERM; sleep 60 & echo $!; echo ready; wait"}, o,
      [&](OutputStream, const std::string& line) {
        if (line == "ready") cancel = true;
        else if (grandchild == 0) grandchild = pid_t(std::stol(line));
      },
      &cancel);
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_NE(r.describe().find("cancelled"), std::string::npos);
  EXPECT_GT(ticks, 0);
  ASSERT_GT(grandchild, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = process_gone(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived the cancel";
}

// Expectation: when the launching process dies without cancelling (SIGKILL here), its child gets
// SIGTERM and ends instead of running on unwatched (mpirun then takes its ranks down).
TEST(LaunchProcess, ChildEndsWhenTheLauncherDies) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(fds[0]);
    run_process({"/bin/sh", "-c", "echo $$; exec sleep 60"}, {},
                [&](OutputStream, const std::string& line) {
                  const std::string l = line + "\n";
                  ssize_t ignored = ::write(fds[1], l.data(), l.size());
                  (void)ignored;
                });
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string line;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  ASSERT_FALSE(line.empty());
  const pid_t child = pid_t(std::stol(line));
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = process_gone(child);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "child " << child << " outlived its launcher";
  if (!gone) ::kill(child, SIGKILL);
}

// ---------------------------------------------------------------- metrics

TEST(LaunchMetrics, ParsesFlatNestedAndNonFinite) {
  const auto r = parse_metrics_line(
      R"({"type":"step","step":3,"loss":5.25,"ok":true,"name":"a\"b\\n","nested":{"x":1.5,"y":[2,3]},"mfu":"NaN","z":null})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->type, "step");
  EXPECT_DOUBLE_EQ(r->number("step"), 3);
  EXPECT_DOUBLE_EQ(r->number("loss"), 5.25);
  EXPECT_DOUBLE_EQ(r->number("ok"), 1);
  EXPECT_EQ(r->string("name"), "a\"b\\n");
  EXPECT_DOUBLE_EQ(r->number("nested.x"), 1.5);
  EXPECT_DOUBLE_EQ(r->number("nested.y.1"), 3);
  EXPECT_TRUE(std::isnan(r->number("mfu", 0)));
  EXPECT_TRUE(std::isnan(r->number("missing")));
  EXPECT_FALSE(parse_metrics_line("not json").has_value());
  EXPECT_FALSE(parse_metrics_line(R"({"a":1)").has_value());
  EXPECT_FALSE(parse_metrics_line("[1,2]").has_value());
  EXPECT_FALSE(parse_metrics_line(R"({"a":1} trailing)").has_value());
}

// Expectation: only complete lines are returned, each once; a line written in two pieces comes
// back whole after its newline; a truncated file is read again from the start.
TEST(LaunchMetrics, TailReadsAppendedLinesIncrementally) {
  const std::string dir = temp_dir("tail");
  const std::string path = dir + "/m.jsonl";
  MetricsTail tail(path);
  EXPECT_TRUE(tail.read_new_lines().empty());  // no file yet
  std::ofstream f(path);
  f << "{\"step\":1}\n{\"step\":2}\n{\"st" << std::flush;
  EXPECT_EQ(tail.read_new_lines(), (std::vector<std::string>{"{\"step\":1}", "{\"step\":2}"}));
  EXPECT_TRUE(tail.read_new_lines().empty());
  f << "ep\":3}\n" << std::flush;
  const auto recs = tail.read_new_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_DOUBLE_EQ(recs[0].number("step"), 3);
  f.close();
  std::ofstream g(path, std::ios::trunc);
  g << "{\"step\":9}\n" << std::flush;
  EXPECT_EQ(tail.read_new_lines(), (std::vector<std::string>{"{\"step\":9}"}));
  fs::remove_all(dir);
}

// Expectation: steps of 10, 1, 2, 3, 4 s: the first two are warm-up, median of 2, 3, 4 = 3 s;
// per-phase medians likewise; peak RSS per rank is the largest sample of each rank.
TEST(LaunchMetrics, MeasuredMediansAfterWarmup) {
  std::vector<MetricsRecord> recs;
  const double times[] = {10, 1, 2, 3, 4};
  for (int i = 0; i < 5; ++i) {
    char line[256];
    std::snprintf(line, sizeof line,
                  R"({"type":"step","step":%d,"loss":%g,"step_time_s":%g,"tokens_per_s":%g,"forward_s":%g,"backward_s":%g,"dp_comm_s":0.5,"data_s":0.1,"gemm_s":1.25})",
                  i + 1, 6.0 - i, times[i], 100.0 * (i + 1), times[i] / 4, times[i] / 2);
    recs.push_back(*parse_metrics_line(line));
  }
  recs.push_back(*parse_metrics_line(R"({"type":"system","rank":0,"rss_bytes":100})"));
  recs.push_back(*parse_metrics_line(R"({"type":"system","rank":1,"rss_bytes":300})"));
  recs.push_back(*parse_metrics_line(R"({"type":"system","rank":0,"rss_bytes":200})"));
  recs.push_back(*parse_metrics_line(R"({"type":"summary","status":"ok","reason":""})"));
  const MeasuredRun m = summarize_metrics(recs);
  EXPECT_EQ(m.steps, 5);
  EXPECT_EQ(m.warmup_steps, 2);
  EXPECT_DOUBLE_EQ(m.step_time_s, 3);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 400);
  EXPECT_DOUBLE_EQ(m.phase_s.at("forward"), 0.75);
  EXPECT_DOUBLE_EQ(m.phase_s.at("backward"), 1.5);
  EXPECT_DOUBLE_EQ(m.phase_s.at("dp_comm"), 0.5);
  EXPECT_DOUBLE_EQ(m.first_loss, 6);
  EXPECT_DOUBLE_EQ(m.last_loss, 2);
  ASSERT_EQ(m.peak_rss_bytes_per_rank.size(), 2u);
  EXPECT_DOUBLE_EQ(m.peak_rss_bytes_per_rank[0], 200);
  EXPECT_DOUBLE_EQ(m.peak_rss_bytes_per_rank[1], 300);
  EXPECT_EQ(m.summary_status, "ok");

  RunRecord rec;
  rec.measured = m;
  Estimate e;
  e.step_time_s = 2.5;
  e.breakdown_s.compute = 2;
  e.breakdown_s.dp_comm = 0.5;
  e.gemm_s = 1.5;
  rec.predicted = e;
  const auto rows = compare_terms(rec);
  auto row = [&](const std::string& t) {
    for (const auto& r : rows) {
      if (r.term == t) return r;
    }
    ADD_FAILURE() << "no row " << t;
    return TermRow{};
  };
  EXPECT_DOUBLE_EQ(row("compute").measured_s, 2.25);  // forward 0.75 + backward 1.5
  EXPECT_DOUBLE_EQ(row("compute").predicted_s, 2);
  EXPECT_DOUBLE_EQ(row("dp_comm").measured_s, 0.5);
  EXPECT_TRUE(std::isnan(row("tp_comm").measured_s));
  EXPECT_DOUBLE_EQ(row("data (not modelled)").measured_s, 0.1);
  // GEMM time is shown right under compute, as a part of it.
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[1].term, "gemm (within compute)");
  EXPECT_DOUBLE_EQ(rows[1].measured_s, 1.25);
  EXPECT_DOUBLE_EQ(rows[1].predicted_s, 1.5);  // the model's GEMMs beside the measured ones
  EXPECT_TRUE(std::isnan(rows[1].simulated_s));
  // A full recompute reruns the forward's GEMMs: the row says they are in it. Selective recompute
  // reruns only the attention, no GEMM of the backend's.
  RunRecord recomputed = rec;
  recomputed.layout.recompute = Recompute::Full;
  EXPECT_EQ(compare_terms(recomputed)[1].term, "gemm (within compute and recompute)");
  recomputed.layout.recompute = Recompute::Selective;
  EXPECT_EQ(compare_terms(recomputed)[1].term, "gemm (within compute)");
  EXPECT_DOUBLE_EQ(row("step").measured_s, 3);
  EXPECT_DOUBLE_EQ(row("step").predicted_s, 2.5);
  EXPECT_TRUE(std::isnan(row("step").simulated_s));
}

// Records that time every term apart: each predicted term has a measured value (none unknown),
// and the measured column adds up to the step. Expectation (one step after none of warm-up):
// parts 0.5 + 0.1 + 0.2 + 0.05 + 0.15 + 0.3 + 0.25 + 0 + data 0.1 = 1.65 of a 1.7 s step, so the
// remainder row is 0.05 s.
TEST(LaunchMetrics, EveryTermMeasuredAndTheRemainderIsItsOwnRow) {
  const MetricsRecord step = *parse_metrics_line(
      R"({"type":"step","step":1,"step_time_s":1.7,"forward_s":0.6,"backward_s":0.9,"compute_s":0.5,)"
      R"("recompute_s":0.1,"tp_comm_s":0.2,"pp_comm_s":0.05,"bubble_s":0.15,"dp_comm_s":0.3,)"
      R"("optimizer_s":0.25,"offload_s":0,"data_s":0.1,"remainder_s":0.05,"gemm_s":0.4})");
  RunRecord rec;
  rec.measured = summarize_metrics({step});
  ASSERT_EQ(rec.measured.warmup_steps, 0);
  const auto rows = compare_terms(rec);
  double parts = 0;
  for (const TermRow& r : rows) {
    EXPECT_TRUE(std::isfinite(r.measured_s)) << r.term << " measured unknown";
    if (r.term != "step" && r.term.find("within compute") == std::string::npos) parts += r.measured_s;
  }
  auto measured = [&](const std::string& t) {
    for (const auto& r : rows)
      if (r.term == t) return r.measured_s;
    ADD_FAILURE() << "no row " << t;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(measured("compute"), 0.5);  // the compute term, not forward + backward
  EXPECT_DOUBLE_EQ(measured("recompute"), 0.1);
  EXPECT_DOUBLE_EQ(measured("tp_comm"), 0.2);
  EXPECT_DOUBLE_EQ(measured("pp_comm"), 0.05);
  EXPECT_DOUBLE_EQ(measured("bubble"), 0.15);
  EXPECT_DOUBLE_EQ(measured("offload"), 0);
  EXPECT_NEAR(measured("remainder"), 0.05, 1e-12);
  EXPECT_NEAR(parts, 1.7, 1e-12);
  EXPECT_EQ(rows.back().term, "step");
  EXPECT_EQ(rows[rows.size() - 2].term, "remainder");
}

// Expectation: memory by kind comes from capplan-train's records (largest over ranks, names
// mapped to the planner's kinds); compare_memory pairs them with the prediction and sums the
// measured device total.
TEST(LaunchMetrics, MemoryByKind) {
  // capplan-train's placement records carry its allocations per rank.
  const MeasuredRun placed = summarize_metrics(
      {*parse_metrics_line(R"({"type":"placement","rank":0,"param_bytes":10,"grad_bytes":10,"optimizer_bytes":20,"activation_device_bytes":30,"activation_working_bytes":7,"activation_host_bytes":5})")});
  EXPECT_DOUBLE_EQ(placed.memory_bytes.at("weights"), 10);
  EXPECT_DOUBLE_EQ(placed.memory_bytes.at("gradients"), 10);
  // A rank's activations are its kept pool and its working buffers together, as the planner
  // counts kept activations and a working set.
  EXPECT_DOUBLE_EQ(placed.memory_bytes.at("activations"), 37);
  EXPECT_DOUBLE_EQ(placed.memory_bytes.at("offloaded"), 5);
  EXPECT_EQ(placed.memory_bytes.count("activation_working"), 0u);
  // The largest of the ranks' sums (a pipeline's first stage keeps more, its last has the LM
  // head's buffers): pool 20 + working 2 on one rank, 12 + 14 on the other -> 26, not 20 + 14.
  const MeasuredRun two = summarize_metrics(
      {*parse_metrics_line(R"({"type":"placement","rank":0,"activation_device_bytes":20,"activation_working_bytes":2})"),
       *parse_metrics_line(R"({"type":"placement","rank":1,"activation_device_bytes":12,"activation_working_bytes":14})")});
  EXPECT_DOUBLE_EQ(two.memory_bytes.at("activations"), 26);

  std::vector<MetricsRecord> recs = {
      *parse_metrics_line(R"({"type":"placement","rank":0,"param_bytes":100,"activation_device_bytes":50})"),
      *parse_metrics_line(R"({"type":"placement","rank":1,"param_bytes":120,"activation_device_bytes":40})")};
  RunRecord rec;
  rec.measured = summarize_metrics(recs);
  EXPECT_DOUBLE_EQ(rec.measured.memory_bytes.at("weights"), 120);
  EXPECT_DOUBLE_EQ(rec.measured.memory_bytes.at("activations"), 50);
  Estimate e;
  e.memory_per_gpu_bytes.weights = 110;
  e.memory_per_gpu_bytes.total = 1000;
  rec.predicted = e;
  const auto rows = compare_memory(rec);
  ASSERT_GE(rows.size(), 7u);
  EXPECT_EQ(rows[0].kind, "weights");
  EXPECT_DOUBLE_EQ(rows[0].predicted_bytes, 110);
  EXPECT_DOUBLE_EQ(rows[0].measured_bytes, 120);
  EXPECT_TRUE(std::isnan(rows[1].measured_bytes));  // gradients not reported
  EXPECT_EQ(rows[6].kind, "total (on the device)");
  EXPECT_DOUBLE_EQ(rows[6].measured_bytes, 170);     // 120 + 50
  EXPECT_DOUBLE_EQ(rows[6].predicted_bytes, 1000);

  // Under the batch split the other parts' gradients get a row of their own (no prediction: the
  // layout has one copy), counted in the total, and the text says what they are; a placement
  // record with none (split_grad_bytes 0, the kernel split) adds no row.
  RunRecord split;
  split.measured = summarize_metrics({*parse_metrics_line(
      R"({"type":"placement","rank":0,"param_bytes":10,"grad_bytes":10,"split_grad_bytes":10,"optimizer_bytes":20,"activation_device_bytes":30})")});
  const auto srows = compare_memory(split);
  ASSERT_EQ(srows.size(), rows.size() + 1);
  EXPECT_EQ(srows[2].kind, "gradient copies");
  EXPECT_DOUBLE_EQ(srows[2].measured_bytes, 10);
  EXPECT_TRUE(std::isnan(srows[2].predicted_bytes));
  EXPECT_EQ(srows[7].kind, "total (on the device)");
  EXPECT_DOUBLE_EQ(srows[7].measured_bytes, 80);  // 10 + 10 + 10 + 20 + 30
  EXPECT_NE(run_record_text(split).find("gradient copies: the gradients of the other parts"),
            std::string::npos);
  RunRecord kernel;
  kernel.measured = summarize_metrics({*parse_metrics_line(
      R"({"type":"placement","rank":0,"param_bytes":10,"grad_bytes":10,"split_grad_bytes":0})")});
  EXPECT_EQ(compare_memory(kernel).size(), rows.size());
  EXPECT_EQ(run_record_text(kernel).find("gradient copies"), std::string::npos);
}

// Expectation: the bubble is the median of the step records' bubble_fraction after warm-up (five
// steps: the first two left out, median of 0.30, 0.20, 0.25 = 0.25); null (pp = 1) is unknown.
TEST(LaunchMetrics, BubbleFromTheStepRecords) {
  std::vector<MetricsRecord> recs;
  for (const char* b : {"0.9", "0.8", "0.30", "0.20", "0.25"}) {
    recs.push_back(*parse_metrics_line(std::string(R"({"type":"step","step_time_s":1,"bubble_fraction":)") + b + "}"));
  }
  EXPECT_DOUBLE_EQ(summarize_metrics(recs).bubble_fraction, 0.25);
  const MeasuredRun none = summarize_metrics(
      {*parse_metrics_line(R"({"type":"step","step_time_s":1,"bubble_fraction":null})")});
  EXPECT_TRUE(std::isnan(none.bubble_fraction));
}

// The cores' cache-line latency after each step: its median, range and samples apart over the
// steps after warm-up, beside the device profile's. Moved since the profile when the medians differ
// more than twofold, during the run when a fifth of its samples (two at least) lie twofold from
// their median, while the profile measured when one of its samples did or its two around the
// lockstep timing differ twofold; run.txt says which, and nothing where the run did not measure it.
TEST(LaunchMetrics, CoresLatencyOfTheRunBesideTheProfiles) {
  auto run_of = [](std::vector<const char*> ns) {
    std::vector<MetricsRecord> recs;
    for (const char* x : ns)
      recs.push_back(*parse_metrics_line(std::string(R"({"type":"step","step_time_s":1,"core_latency_ns":)") + x + "}"));
    RunRecord r;
    r.measured = summarize_metrics(recs);
    return r;
  };
  // Two warm-up steps (seven records) left out: 160 160 40 45 50 42 41.
  RunRecord r = run_of({"900", "900", "160", "160", "40", "45", "50", "42", "41"});
  EXPECT_EQ(r.measured.core_latency.samples, 7);
  EXPECT_EQ(r.measured.core_latency.median_ns, 45);
  EXPECT_EQ(r.measured.core_latency.min_ns, 40);
  EXPECT_EQ(r.measured.core_latency.max_ns, 160);
  EXPECT_EQ(r.measured.core_latency.apart, 2);
  CoreLatencyComparison c = compare_core_latency(r);
  EXPECT_TRUE(c.moved_during_run);
  EXPECT_FALSE(c.moved_since_profile);  // no profile
  EXPECT_FALSE(c.moved_during_profile);
  std::string text = core_latency_text(c);
  EXPECT_NE(text.find("this run          45 ns (median of 7 steps, 40-160)"), std::string::npos) << text;
  EXPECT_NE(text.find("device profile  not measured"), std::string::npos) << text;
  EXPECT_NE(text.find("It moved more than twofold during the run."), std::string::npos) << text;

  auto profile = std::make_shared<DeviceProfile>();
  profile->core_latency = summarize_core_latency({150, 160, 170});
  r = run_of({"40", "40", "40", "41", "39", "42", "40", "160"});  // one sample apart: a moment's interruption
  r.scenario.cluster.device_profile = profile;
  c = compare_core_latency(r);
  EXPECT_FALSE(c.moved_during_run);
  EXPECT_TRUE(c.moved_since_profile);  // 40 against 160
  EXPECT_FALSE(c.moved_during_profile);
  text = core_latency_text(c);
  EXPECT_NE(text.find("It moved more than twofold between the profile and the run."), std::string::npos) << text;
  EXPECT_NE(text.find("tp_comm"), std::string::npos) << text;

  profile->core_latency = summarize_core_latency({40, 42, 41});
  profile->core_latency.lockstep_before_ns = 41;
  profile->core_latency.lockstep_after_ns = 170;
  c = compare_core_latency(r);
  EXPECT_TRUE(c.moved_during_profile);
  EXPECT_FALSE(c.moved_since_profile);
  text = core_latency_text(c);
  EXPECT_NE(text.find("41 before and 170 after its lockstep timing"), std::string::npos) << text;
  EXPECT_NE(text.find("It moved more than twofold while the profile measured."), std::string::npos) << text;

  profile->core_latency.lockstep_after_ns = 44;
  c = compare_core_latency(r);
  EXPECT_FALSE(c.moved_during_profile || c.moved_since_profile || c.moved_during_run);
  EXPECT_EQ(core_latency_text(c).find("It moved"), std::string::npos);
  // A run without the samples (one rank, a GPU, ranks taking turns on the cores) says nothing.
  const RunRecord none = run_of({});
  EXPECT_EQ(none.measured.core_latency.samples, 0);
  EXPECT_EQ(core_latency_text(compare_core_latency(none)), "");
}

// ---------------------------------------------------------------- the whole run, with a fake trainer

PreparedRun fake_prepared(const std::string& dir, const std::string& script) {
  PreparedRun p;
  p.record.run_dir = dir;
  p.record.steps = 3;
  p.record.command = {"/bin/sh", "-c", script, "fake-trainer", dir + "/metrics.jsonl"};
  p.metrics_file = dir + "/metrics.jsonl";
  p.log_file = dir + "/output.log";
  return p;
}

std::optional<MetricsRecord> read_record(const std::string& dir) {
  return parse_metrics_line(read_text(dir + "/run.json"));  // the flat reader takes any JSON object
}

// Expectation: a fake trainer writing three step records and a summary: succeeded, 3 steps
// measured (1 warm-up), metrics streamed to the callback in order, output in output.log, and
// run.json + run.txt written.
TEST(LaunchRun, SucceededRunRecordsMeasuredFigures) {
  const std::string dir = temp_dir("ok");
  const std::string script =
      "for i in 1 2 3; do echo \"step $i\"; "
      "echo \"{\\\"type\\\":\\\"step\\\",\\\"step\\\":$i,\\\"loss\\\":5,\\\"step_time_s\\\":0.$i,"
      "\\\"forward_s\\\":0.1,\\\"backward_s\\\":0.2}\" >> \"$1\"; done; "
      "echo '{\"type\":\"summary\",\"status\":\"ok\"}' >> \"$1\"";
  std::vector<double> seen;
  RunCallbacks cb;
  std::vector<std::string> out;
  cb.on_output = [&](OutputStream, const std::string& l) { out.push_back(l); };
  cb.on_metrics = [&](const MetricsRecord& r) {
    if (r.type == "step") seen.push_back(r.number("step"));
  };
  const RunRecord rec = execute_run(fake_prepared(dir, script), cb);
  EXPECT_EQ(rec.status, RunStatus::Succeeded) << rec.reason;
  EXPECT_EQ(rec.measured.steps, 3);
  EXPECT_EQ(rec.measured.warmup_steps, 1);
  EXPECT_DOUBLE_EQ(rec.measured.step_time_s, 0.25);  // median of 0.2, 0.3
  EXPECT_EQ(seen, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(out, (std::vector<std::string>{"step 1", "step 2", "step 3"}));
  EXPECT_EQ(read_text(dir + "/output.log"), "step 1\nstep 2\nstep 3\n");
  const auto json = read_record(dir);
  ASSERT_TRUE(json.has_value()) << read_text(dir + "/run.json");
  EXPECT_EQ(json->string("status"), "succeeded");
  EXPECT_DOUBLE_EQ(json->number("measured.step_time_s"), 0.25);
  EXPECT_EQ(json->string("command.0"), "/bin/sh");
  EXPECT_NE(read_text(dir + "/run.txt").find("succeeded"), std::string::npos);
  fs::remove_all(dir);
}

// Expectation: a trainer that fails writes a record with status failed and the reason: the
// exit status and the job's own error line, not mpirun's banner after it.
TEST(LaunchRun, FailedRunStillWritesItsRecord) {
  const std::string dir = temp_dir("fail");
  const RunRecord rec = execute_run(
      fake_prepared(dir, "echo '<command line>: error: --gbs: 7 is not divisible by dp 2 x mbs 1' >&2; "
                         "echo ---------- >&2; echo 'mpirun detected that one or more processes exited' >&2; "
                         "echo ---------- >&2; exit 2"), {});
  EXPECT_EQ(rec.status, RunStatus::Failed);
  EXPECT_NE(rec.reason.find("exit status 2"), std::string::npos) << rec.reason;
  EXPECT_NE(rec.reason.find("not divisible"), std::string::npos) << rec.reason;
  EXPECT_EQ(rec.reason.find("mpirun detected"), std::string::npos) << rec.reason;  // the cause, not the echo
  const auto json = read_record(dir);
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->string("status"), "failed");
  EXPECT_NE(json->string("reason").find("not divisible"), std::string::npos);
  EXPECT_DOUBLE_EQ(json->number("exit_code"), 2);
  fs::remove_all(dir);
}

TEST(LaunchRun, CancelledRunWritesItsRecord) {
  const std::string dir = temp_dir("cancel");
  std::atomic<bool> cancel{false};
  RunCallbacks cb;
  cb.on_output = [&](OutputStream, const std::string& l) {
    if (l == "started") cancel = true;
  };
  const RunRecord rec = execute_run(fake_prepared(dir, "echo started; sleep 60"), cb, &cancel);
  EXPECT_EQ(rec.status, RunStatus::Cancelled);
  EXPECT_NE(rec.reason.find("cancelled"), std::string::npos);
  const auto json = read_record(dir);
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->string("status"), "cancelled");
  fs::remove_all(dir);
}

// Expectation: a job that outlives the time limit is stopped and the run failed, "timed out".
TEST(LaunchRun, TimeLimitStopsTheJob) {
  const std::string dir = temp_dir("timeout");
  PreparedRun p = fake_prepared(dir, "echo started; exec sleep 60");
  p.timeout_s = 0.3;
  const RunRecord rec = execute_run(p, {});
  EXPECT_EQ(rec.status, RunStatus::Failed);
  EXPECT_NE(rec.reason.find("timed out after 0.3 s"), std::string::npos) << rec.reason;
  EXPECT_EQ(rec.term_signal, SIGTERM);
  const auto json = read_record(dir);
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->string("status"), "failed");
  fs::remove_all(dir);
}

TEST(LaunchRun, MissingProgramIsAFailedRunWithReason) {
  const std::string dir = temp_dir("missing");
  PreparedRun p = fake_prepared(dir, "");
  p.record.command = {"/nonexistent/mpirun", "-np", "2"};
  const RunRecord rec = execute_run(p, {});
  EXPECT_EQ(rec.status, RunStatus::Failed);
  EXPECT_NE(rec.reason.find("/nonexistent/mpirun"), std::string::npos) << rec.reason;
  EXPECT_TRUE(fs::exists(dir + "/run.json"));
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- prepare_run on bad input

LaunchRequest request_for(const std::string& dir) {
  LaunchRequest q;
  q.scenario = scenario_for("gpt2-124m", 2, 8);
  q.layout.dp = 2;
  q.layout.mbs = 1;
  q.scale_down = true;
  q.steps = 3;
  q.run_dir = dir;
  q.train_binary = "/bin/true";  // any executable: nothing is started here
  q.mpirun = "/bin/true";
  q.measure_machine = false;
  q.stated_gemm_peak_gflops = 50;
  return q;
}

bool mentions(const Diagnostics& d, const std::string& text) {
  return d.to_string().find(text) != std::string::npos;
}

TEST(LaunchPrepare, GoodRequestWritesModelAndCommand) {
  const std::string dir = temp_dir("prep");
  const auto p = prepare_run(request_for(dir));
  ASSERT_TRUE(p.ok()) << p.diagnostics.to_string();
  EXPECT_TRUE(fs::exists(dir + "/model.yaml"));
  const std::string cmd = read_text(dir + "/command.txt");
  EXPECT_NE(cmd.find("-np 2"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("--model " + dir + "/model.yaml"), std::string::npos) << cmd;
  ASSERT_TRUE(p.value->record.predicted.has_value());
  EXPECT_EQ(p.value->record.layout.dp, 2);
  // plan.yaml reproduces the prediction: the same estimate from the saved artifact.
  const auto plan = load_plan(dir + "/plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.diagnostics.to_string();
  const Estimate again = estimate(plan.value->scenario, plan.value->layout);
  EXPECT_NEAR(again.step_time_s, p.value->record.predicted->step_time_s,
              1e-6 * p.value->record.predicted->step_time_s);
  EXPECT_EQ(plan.value->scenario.model.layers, p.value->record.scenario.model.layers);
  fs::remove_all(dir);
}

TEST(LaunchPrepare, TooManyRanksIsAnErrorNamingTheCount) {
  const std::string dir = temp_dir("ranks");
  LaunchRequest q = request_for(dir);
  q.scenario = scenario_for("gpt3-175b", 960, 1920);
  q.layout.dp = 15, q.layout.tp = 8, q.layout.pp = 8, q.layout.mbs = 1;
  q.max_ranks = 8;
  const auto p = prepare_run(q);
  EXPECT_FALSE(p.ok());
  EXPECT_TRUE(mentions(p.diagnostics, "960 ranks")) << p.diagnostics.to_string();
  EXPECT_TRUE(mentions(p.diagnostics, "<command line>")) << p.diagnostics.to_string();
  // The refused run leaves its record with the reason.
  const auto json = read_record(dir);
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->string("status"), "not-started");
  EXPECT_NE(json->string("reason").find("960 ranks"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/model.yaml"));  // nothing prepared for a refused run
  // A refusal in a directory that holds an earlier run's record leaves that record alone.
  std::ofstream(dir + "/run.json") << "{\"status\": \"succeeded\"}\n";
  EXPECT_FALSE(prepare_run(q).ok());
  EXPECT_EQ(read_text(dir + "/run.json"), "{\"status\": \"succeeded\"}\n");
  fs::remove_all(dir);
}

TEST(LaunchPrepare, MissingTrainerAndUnwritableDirAreReportedTogether) {
  LaunchRequest q = request_for("/proc/capplan-no-such-dir/run");
  q.train_binary = "/nonexistent/capplan-train";
  const auto p = prepare_run(q);
  EXPECT_FALSE(p.ok());
  EXPECT_TRUE(mentions(p.diagnostics, "/nonexistent/capplan-train")) << p.diagnostics.to_string();
  EXPECT_TRUE(mentions(p.diagnostics, "run directory")) << p.diagnostics.to_string();
}

TEST(LaunchPrepare, WithoutScaleDownALargeModelDoesNotFit) {
  const std::string dir = temp_dir("fit");
  LaunchRequest q = request_for(dir);
  q.scenario = scenario_for("gpt3-175b", 2, 8);
  q.layout.dp = 1, q.layout.pp = 2;
  q.scale_down = false;
  const auto p = prepare_run(q);
  EXPECT_FALSE(p.ok());
  EXPECT_TRUE(mentions(p.diagnostics, "--scale-down")) << p.diagnostics.to_string();
  fs::remove_all(dir);
}

// Expectation: a layout within the limit comes back unchanged; 960 ranks into 8 keeps
// tp = pp = 2 and dp = 8 / 4 = 2; into 2 ranks, tp x pp = 4 is over the limit, so pp goes to 1
// (dp 1, tp 2); into 1 rank everything is 1, the interleaved schedule becomes 1F1B with vp 1 and
// sp goes off; zero, recompute, offload and order are kept throughout.
TEST(ShrinkLayout, CutsTpPpThenDpAndKeepsTheKnobs) {
  Layout l;
  l.dp = 15, l.tp = 8, l.pp = 8, l.vp = 2, l.mbs = 1, l.zero = 1, l.sp = true, l.offload = true;
  l.schedule = Schedule::Interleaved, l.recompute = Recompute::Selective, l.order = "TPD";
  const ShrunkLayout same = shrink_layout(l, 960);
  EXPECT_EQ(same.layout.gpus(), 960);
  EXPECT_TRUE(same.changes.empty());

  const ShrunkLayout eight = shrink_layout(l, 8);
  EXPECT_EQ(eight.layout.dp, 2);
  EXPECT_EQ(eight.layout.tp, 2);
  EXPECT_EQ(eight.layout.pp, 2);
  EXPECT_EQ(eight.layout.vp, 2);
  EXPECT_EQ(eight.layout.schedule, Schedule::Interleaved);
  EXPECT_TRUE(eight.layout.sp);
  ASSERT_EQ(eight.changes.size(), 1u);
  EXPECT_EQ(eight.changes[0], "layout dp 15 tp 8 pp 8 (960 ranks) -> dp 2 tp 2 pp 2 (8 ranks): at most 8 ranks here");

  const ShrunkLayout two = shrink_layout(l, 2);
  EXPECT_EQ(two.layout.dp, 1);
  EXPECT_EQ(two.layout.tp, 2);
  EXPECT_EQ(two.layout.pp, 1);
  EXPECT_EQ(two.layout.vp, 1);
  EXPECT_EQ(two.layout.schedule, Schedule::OneFOneB);

  const ShrunkLayout one = shrink_layout(l, 1);
  EXPECT_EQ(one.layout.gpus(), 1);
  EXPECT_FALSE(one.layout.sp);
  EXPECT_EQ(one.layout.zero, 1);
  EXPECT_EQ(one.layout.recompute, Recompute::Selective);
  EXPECT_TRUE(one.layout.offload);
  EXPECT_EQ(one.layout.order, "TPD");
  EXPECT_EQ(one.changes.size(), 3u);
}

}  // namespace
}  // namespace capplan::rt

namespace capplan::rt {
namespace {

// Expectation: list_runs lists every folder with a record or a plan, newest name first, reads
// status, steps and the plan back, says "unknown" for a corrupt run.json instead of throwing,
// skips folders that hold neither, and a missing runs folder lists nothing. Without checkpoints
// a run is not resumable.
TEST(RunHistory, ListsRunFoldersNewestFirstAndSurvivesCorruptRecords) {
  EXPECT_TRUE(list_runs("/nonexistent/capplan/runs").empty());
  const fs::path runs = capplan::test::scratch_dir("history");
  fs::create_directories(runs / "run-20260101-000000");
  fs::create_directories(runs / "run-20260202-000000");
  fs::create_directories(runs / "not-a-run");
  std::ofstream(runs / "run-20260101-000000" / "run.json")
      << R"({"status":"succeeded","reason":"","started_utc":"2026-01-01T00:00:00Z","steps":12,)"
      << R"("run":{"model":{"name":"gpt2-124m-scaled"}}})" << "\n";
  Plan plan;
  plan.scenario.model = *load_model("gpt2-124m").value;
  plan.scenario.cluster = *load_cluster("p4d.24xlarge").value;
  plan.scenario.nodes = 1;
  plan.scenario.training.gbs = 8;
  plan.layout.dp = 2;
  ASSERT_EQ(save_plan(plan, (runs / "run-20260101-000000" / "plan.yaml").string()), "");
  std::ofstream(runs / "run-20260202-000000" / "run.json") << "{ not json";
  const std::vector<RunListing> l = list_runs(runs.string());
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].name, "run-20260202-000000");
  EXPECT_EQ(l[0].status, "unknown");
  EXPECT_FALSE(l[0].resumable());
  EXPECT_EQ(l[1].status, "succeeded");
  EXPECT_EQ(l[1].steps, 12);
  EXPECT_EQ(l[1].model, "gpt2-124m-scaled");
  ASSERT_TRUE(l[1].plan.has_value());
  EXPECT_EQ(l[1].plan->layout.dp, 2);
  EXPECT_EQ(l[1].checkpoint_step, -1);
  EXPECT_FALSE(l[1].resumable());  // a plan but no checkpoint
  fs::remove_all(runs);
}

// Expectation: an earlier run's comparison tables read back from its record as written (unknown
// figures, written as null, come back unknown); a corrupt or missing record gives empty tables.
TEST(RunHistory, ComparisonOfAnEarlierRunReadsBackFromItsRecord) {
  const fs::path dir = capplan::test::scratch_dir("history-comparison");
  RunRecord rec;
  rec.run_dir = dir.string();
  Estimate e;
  e.breakdown_s.compute = 0.25;
  e.step_time_s = 0.3;
  e.step_time_s_p10 = 0.27;
  e.step_time_s_p90 = 0.33;
  e.memory_per_gpu_bytes.weights = 1000;
  e.memory_per_gpu_bytes.total = 4000;
  rec.predicted = e;
  rec.measured = summarize_metrics(
      {*parse_metrics_line(R"({"type":"placement","rank":0,"param_bytes":990,"activation_device_bytes":30})")});
  ASSERT_EQ(write_run_record(rec), "");
  const RunComparison back = read_run_comparison(dir.string());
  const std::vector<TermRow> terms = compare_terms(rec);
  const std::vector<MemoryRow> memory = compare_memory(rec);
  ASSERT_EQ(back.terms.size(), terms.size());
  ASSERT_EQ(back.memory.size(), memory.size());
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  for (size_t i = 0; i < terms.size(); ++i) {
    EXPECT_EQ(back.terms[i].term, terms[i].term);
    EXPECT_TRUE(same(back.terms[i].predicted_s, terms[i].predicted_s)) << terms[i].term;
    EXPECT_TRUE(same(back.terms[i].measured_s, terms[i].measured_s)) << terms[i].term;
  }
  for (size_t i = 0; i < memory.size(); ++i) {
    EXPECT_EQ(back.memory[i].kind, memory[i].kind);
    EXPECT_TRUE(same(back.memory[i].predicted_bytes, memory[i].predicted_bytes)) << memory[i].kind;
    EXPECT_TRUE(same(back.memory[i].measured_bytes, memory[i].measured_bytes)) << memory[i].kind;
  }
  // The step's row carries the predicted band; the terms' rows have none.
  EXPECT_EQ(back.terms.back().term, "step");
  EXPECT_DOUBLE_EQ(back.terms.back().predicted_p10_s, 0.27);
  EXPECT_DOUBLE_EQ(back.terms.back().predicted_p90_s, 0.33);
  EXPECT_TRUE(std::isnan(back.terms.front().predicted_p10_s));
  EXPECT_DOUBLE_EQ(back.memory[0].measured_bytes, 990);
  EXPECT_TRUE(std::isnan(back.memory[1].measured_bytes));  // gradients not reported
  std::ofstream(dir / "run.json", std::ios::trunc) << "{ not json";
  EXPECT_TRUE(read_run_comparison(dir.string()).terms.empty());
  EXPECT_TRUE(read_run_comparison((dir / "missing").string()).memory.empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace capplan::rt
