// capplan-train end to end under mpirun on tiny models: every layout (DP, TP, PP, their
// products, both pipeline schedules, placement orders) reproduces the single-rank losses, ZeRO-1
// is bitwise equal to plain DP, ZeRO-2/3 match ZeRO-1 and shrink the measured memory per rank,
// a rank's threads may split each micro-batch instead of each kernel,
// runs are deterministic, a killed run resumed from its checkpoint continues bitwise, and bad input stops every rank with a clear message.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io/data.h"
#include "io/metrics_schema.h"
#include "io/report.h"
#include "planner/json.h"
#include "support/run_program.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;  // exit status of mpirun; 124: hung and was killed, 128 + N: killed by signal N
  std::string output;
  std::map<int, double> losses;  // step -> loss
};

// One folder per test, so ctest -j can run the tests side by side.
fs::path work_dir() {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  static std::map<std::string, fs::path> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  fs::path d = fs::path(CAPPLAN_BINARY_DIR) / "tests" / "runtime" / "train_work" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return made[name] = d;
}

// Tiny models: GPT-2 style and Llama style (GQA, SwiGLU, RMSNorm, RoPE); vocab 97 is not
// divisible by tp so the vocab-parallel padding is exercised.
std::string model_file(bool llama) {
  const fs::path p = work_dir() / (llama ? "tiny_llama.yaml" : "tiny_gpt.yaml");
  if (!fs::exists(p)) {
    std::ofstream f(p);
    f << "name: " << (llama ? "tiny-llama" : "tiny-gpt") << "\n"
      << "layers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n";
    if (llama) f << "kv_heads: 2\nffn: swiglu\nnorm: rmsnorm\nposition: rope\n";
  }
  return p.string();
}

// Eight layers and eight heads so that pp and tp can each go up to 8.
std::string deep_model_file() {
  const fs::path p = work_dir() / "tiny_deep.yaml";
  if (!fs::exists(p)) {
    std::ofstream f(p);
    f << "name: tiny-deep\nlayers: 8\nhidden: 32\nheads: 8\nvocab: 97\nseq_len: 16\n";
  }
  return p.string();
}

Result run_once(int np, const std::string& args) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const capplan::test::ProgramRun p = capplan::test::run_program(
      CAPPLAN_MPIEXEC, "--allow-run-as-root --oversubscribe -np " + std::to_string(np) + " '" +
                           std::string(CAPPLAN_TRAIN) + "' --threads 1 " + args, 120);
  Result r;
  r.status = p.status;
  r.output = p.out + p.err;
  std::istringstream is(r.output);
  for (std::string line; std::getline(is, line);) {
    int step = 0, total = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "step %d/%d loss %lf", &step, &total, &loss) == 3)
      r.losses[step] = loss;
  }
  return r;
}

// mpirun itself occasionally fails to start a job on a loaded machine (before any rank prints);
// such a launch failure is retried once and reported, never taken as the run's result.
Result run(int np, const std::string& args) {
  Result r = run_once(np, args);
  if (r.status != 0 && r.output.find("capplan-train") == std::string::npos &&
      r.output.find("error:") == std::string::npos) {
    std::fprintf(stderr, "launch failure (retrying once):\n%s\n", r.output.c_str());
    r = run_once(np, args);
  }
  return r;
}

std::string common(bool llama, int steps = 20) {
  return "--model " + model_file(llama) + " --gbs 8 --mbs 1 --steps " + std::to_string(steps) +
         " --lr 1e-2 --warmup 2 --seed 42";
}

void expect_close(const Result& ref, const Result& got, double rel, const std::string& what) {
  ASSERT_EQ(ref.status, 0) << ref.output;
  ASSERT_EQ(got.status, 0) << what << "\n" << got.output;
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what << "\n" << got.output;
  for (const auto& [step, loss] : ref.losses) {
    const double other = got.losses.at(step);
    EXPECT_LE(std::abs(other - loss), rel * std::abs(loss))
        << what << " step " << step << ": Expectation " << loss << " Actual result " << other;
  }
}

// Per-step losses of every layout within 1e-5 relative of one rank: the layouts add the same
// fp32 terms in a different order (accumulation over micro-batches vs over ranks, TP partial sums),
// each step moving the loss by ~1e-7 relative; 20 steps of AdamW stay orders of magnitude inside.
TEST(RuntimeTrain, LayoutsMatchSingleRank) {
  for (bool llama : {false, true}) {
    const Result ref = run(1, common(llama));
    ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
    expect_close(ref, run(2, common(llama) + " --dp 2"), 1e-5, "dp 2");
    expect_close(ref, run(4, common(llama) + " --dp 4 --mbs 2"), 1e-5, "dp 4 mbs 2");
    expect_close(ref, run(2, common(llama) + " --tp 2"), 1e-5, "tp 2");
    expect_close(ref, run(4, common(llama) + " --dp 2 --tp 2 --order TPD"), 1e-5, "dp 2 tp 2 TPD");
  }
}

// ---- context parallelism and mixture of experts ----

// A tiny MoE model (Llama style): both layers' MLPs are 4 experts of width 16, top-2, plus one
// shared expert; `capacity` 1.0 (each expert takes at most 16 tokens * 2 / 4 = 8 of a rank's 16
// per micro-batch, so choices are dropped every step) or 0 (dropless).
std::string moe_model_file(double capacity) {
  const fs::path p = work_dir() / (capacity > 0 ? "tiny_moe.yaml" : "tiny_moe_dropless.yaml");
  if (!fs::exists(p)) {
    std::ofstream f(p);
    f << "name: tiny-moe\nlayers: 2\nhidden: 32\nheads: 4\nkv_heads: 2\nvocab: 97\nseq_len: 16\n"
      << "ffn: swiglu\nnorm: rmsnorm\nposition: rope\n"
      << "moe:\n  experts: 4\n  top_k: 2\n  expert_ffn_hidden: 16\n  shared_experts: 1\n"
      << "  capacity_factor: " << capacity << "\n";
  }
  return p.string();
}

// Per-step values of `key` ("aux_loss", "dropped") in rank 0's step lines.
std::map<int, double> step_values(const std::string& output, const std::string& key) {
  std::map<int, double> out;
  std::istringstream is(output);
  for (std::string line; std::getline(is, line);) {
    int step = 0, total = 0;
    const size_t at = line.find(" " + key + " ");
    if (at == std::string::npos || std::sscanf(line.c_str(), "step %d/%d", &step, &total) != 2)
      continue;
    out[step] = std::atof(line.c_str() + at + key.size() + 2);
  }
  return out;
}

// Context parallelism: each sequence in 2 * cp chunks (rank i: chunks i and 2cp - 1 - i), ring
// attention over the cp ranks, dense gradients summed over dp x cp. Per-step losses within 1e-5
// of one rank on both model families (learned positions and RoPE), for cp 2, cp 2 x tp 2, cp 4,
// dp 2 x cp 2 with ZeRO-1 and full recompute, pp 2 x cp 2 and dp 2 x cp 2 with ZeRO-3 (shards
// over dp x cp): the ring's online softmax adds the same terms as one softmax in another order.
TEST(RuntimeTrain, ContextParallelMatchesSingleRank) {
  for (bool llama : {false, true}) {
    const Result ref = run(1, common(llama));
    ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
    const Result cp2 = run(2, common(llama) + " --cp 2");
    expect_close(ref, cp2, 1e-5, "cp 2");
    EXPECT_NE(cp2.output.find("0=(d0,p0,t0,c0) 1=(d0,p0,t0,c1)"), std::string::npos) << cp2.output;
    expect_close(ref, run(4, common(llama) + " --cp 2 --tp 2"), 1e-5, "cp 2 tp 2");
    if (llama) {
      expect_close(ref, run(4, common(llama) + " --cp 4"), 1e-5, "cp 4");
      expect_close(ref, run(4, common(llama) + " --dp 2 --cp 2 --zero 1 --recompute full"), 1e-5,
                   "dp 2 cp 2 zero 1 recompute full");
      expect_close(ref, run(4, common(llama) + " --pp 2 --cp 2"), 1e-5, "pp 2 cp 2");
      expect_close(ref, run(4, common(llama) + " --dp 2 --cp 2 --zero 3"), 1e-5, "dp 2 cp 2 zero 3");
    }
  }
}

// Expert parallelism, these layouts on the MoE model with capacity 1.0: ep 2
// (dp 2), ep 4 (dp 4), dp 2 x ep 2 (dp 4: two replicas of each pair of experts), tp 2 x ep 2 and
// pp 2 x ep 2 (each dp 2). Expectation: per-step losses within 1e-5 of one rank, and the same
// routing: the same number of dropped choices every step (capacity is per rank's micro-batch of
// 16 tokens in every layout) and the load-balancing loss within 1e-5.
TEST(RuntimeTrain, MixtureOfExpertsLayoutsMatchSingleRank) {
  const std::string a = "--model " + moe_model_file(1.0) +
                        " --gbs 8 --mbs 1 --steps 20 --lr 1e-2 --warmup 2 --seed 42";
  const Result ref = run(1, a);
  ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
  const auto dropped = step_values(ref.output, "dropped"), aux = step_values(ref.output, "aux_loss");
  ASSERT_EQ(dropped.size(), 20u) << ref.output;
  EXPECT_GT(dropped.at(1), 0) << "capacity 1.0 drops choices";
  // Near balance the loss is coeff * E * sum f P ~ 0.01 per MoE layer: two layers ~ 0.02.
  EXPECT_NEAR(aux.at(1), 0.02, 0.005);
  for (const auto& [np, layout] :
       {std::pair{2, "--dp 2 --ep 2"}, std::pair{4, "--dp 4 --ep 4"}, std::pair{4, "--dp 4 --ep 2"},
        std::pair{4, "--dp 2 --tp 2 --ep 2"}, std::pair{4, "--dp 2 --pp 2 --ep 2"}}) {
    const Result got = run(np, a + " " + layout);
    expect_close(ref, got, 1e-5, layout);
    const auto d = step_values(got.output, "dropped"), x = step_values(got.output, "aux_loss");
    ASSERT_EQ(d.size(), 20u) << got.output;
    for (const auto& [step, n] : dropped) {
      EXPECT_EQ(d.at(step), n) << layout << " step " << step;
      EXPECT_NEAR(x.at(step), aux.at(step), 1e-5 * aux.at(step)) << layout << " step " << step;
    }
  }
}

// Both axes at once on the dropless MoE model (so that splitting a micro-batch's tokens over cp
// ranks changes no expert's load): ep over the cp ranks, and ep 4 over dp 2 x cp 2 with ZeRO-1.
TEST(RuntimeTrain, ContextAndExpertParallelTogetherMatchSingleRank) {
  const std::string a = "--model " + moe_model_file(0) +
                        " --gbs 8 --mbs 1 --steps 20 --lr 1e-2 --warmup 2 --seed 42";
  const Result ref = run(1, a);
  ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
  EXPECT_EQ(step_values(ref.output, "dropped").at(1), 0);
  expect_close(ref, run(2, a + " --cp 2 --ep 2"), 1e-5, "cp 2 ep 2");
  expect_close(ref, run(4, a + " --dp 2 --cp 2 --ep 4 --zero 1"), 1e-5, "dp 2 cp 2 ep 4 zero 1");
}

// A killed dp 2 x cp 2 x ep 2 run resumes from its step-10 checkpoint (each rank's dense shard,
// experts and their Adam moments) and continues bitwise; another ep cannot resume from it.
TEST(RuntimeTrain, ContextAndExpertParallelResumeBitwise) {
  const fs::path dir = work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string args = "--model " + moe_model_file(1.0) +
                           " --gbs 8 --mbs 1 --steps 20 --lr 1e-2 --warmup 2 --seed 42 --dp 2 "
                           "--cp 2 --ep 2 --zero 1 --checkpoint-every 10";
  const Result straight = run(4, args);
  ASSERT_EQ(straight.status, 0) << straight.output;
  const Result killed = run(4, args + " --checkpoint-dir " + dir.string() + " --kill-at-step 12");
  EXPECT_NE(killed.status, 0) << killed.output;
  ASSERT_TRUE(fs::exists(dir / "step-000010" / "manifest.json"));
  const Result resumed = run(4, args + " --checkpoint-dir " + dir.string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step 10"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 10u) << resumed.output;
  for (int step = 11; step <= 20; ++step)
    EXPECT_EQ(resumed.losses.at(step), straight.losses.at(step)) << "step " << step;
  const std::string other = "--model " + moe_model_file(1.0) +
                            " --gbs 8 --mbs 1 --steps 20 --lr 1e-2 --warmup 2 --seed 42 --dp 2 "
                            "--cp 2 --ep 4 --zero 1 --checkpoint-dir " + dir.string();
  const Result refused = run(4, other);
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_NE(refused.output.find("ep: the checkpoint has 2, this run has 4"), std::string::npos)
      << refused.output;
}

// The LM head and loss run over chunks of about 8 MiB of logits: with vocab 8192 and 1,024 rows
// per micro-batch one rank takes 4 chunks of 256 rows, tp 2 (4,096 vocab rows each, with and
// without SP) 2 chunks of 512, where every chunk's max and sums cross the TP group.
TEST(RuntimeTrain, ChunkedHeadUnderTensorParallelMatchesSingleRank) {
  const fs::path p = work_dir() / "wide_vocab.yaml";
  {
    std::ofstream f(p);
    f << "name: tiny-wide-vocab\nlayers: 1\nhidden: 32\nheads: 4\nvocab: 8192\nseq_len: 64\n";
  }
  const std::string args =
      "--model " + p.string() + " --gbs 16 --mbs 16 --steps 5 --lr 1e-2 --warmup 1 --seed 3";
  const Result ref = run(1, args);
  ASSERT_EQ(ref.losses.size(), 5u) << ref.output;
  expect_close(ref, run(2, args + " --tp 2"), 1e-5, "tp 2");
  expect_close(ref, run(2, args + " --tp 2 --sp"), 1e-5, "tp 2 sp");
}

// ZeRO-1 changes only where Adam runs, not what it computes (optimizer.h): bitwise equal.
TEST(RuntimeTrain, ZeroOneBitwiseEqualsPlainDataParallel) {
  const Result plain = run(4, common(true, 10) + " --dp 4");
  const Result zero = run(4, common(true, 10) + " --dp 4 --zero 1");
  expect_close(plain, zero, 0.0, "zero 1 dp 4");
  EXPECT_EQ(zero.output.find("warning"), std::string::npos) << zero.output;
  const Result plain_tp = run(8, common(false, 10) + " --dp 2 --tp 2 --pp 2");
  const Result zero_tp = run(8, common(false, 10) + " --dp 2 --tp 2 --pp 2 --zero 1");
  expect_close(plain_tp, zero_tp, 0.0, "zero 1 dp 2 tp 2 pp 2");
}

TEST(RuntimeTrain, SameRunTwiceIsBitwiseIdentical) {
  const Result a = run(2, common(true, 10) + " --dp 2 --recompute full");
  const Result b = run(2, common(true, 10) + " --dp 2 --recompute full");
  expect_close(a, b, 0.0, "determinism");
  const Result c = run(2, common(true, 10) + " --dp 2");
  expect_close(a, c, 0.0, "recompute full vs none");
}

// With tp = pp = 1 and ZeRO <= 1 the threads of a rank split each micro-batch: every part runs
// through its own replica of the model and the parts' gradients are summed at the end of the
// step. Losses stay within 1e-5 of one thread (the same terms summed in another order), a run is
// bitwise repeatable, ZeRO-1 stays bitwise equal to plain DP over ranks of split batches, and a
// killed run resumes bitwise.
TEST(RuntimeTrain, BatchSplitOverThreadsMatchesOneThread) {
  const auto npos = std::string::npos;
  for (bool llama : {false, true}) {
    const std::string a = common(llama) + " --mbs 2";
    const Result one = run(1, a);
    const fs::path m = work_dir() / "metrics.jsonl";
    fs::remove(m);
    const Result split = run(1, a + " --threads 2 --metrics " + m.string());
    ASSERT_NE(split.output.find("batch split: each micro-batch in 2 parts of 1 sequence"), npos)
        << split.output;
    const std::string records = capplan::test::read_text(m);
    EXPECT_NE(records.find("\"batch_split\":2"), npos) << records.substr(0, 400);
    EXPECT_NE(records.find("\"split_wait_s\":"), npos) << "step records carry the threads' wait";
    expect_close(one, split, 1e-5, "batch split in 2");
    expect_close(split, run(1, a + " --threads 2"), 0.0, "batch split twice");
    const fs::path mk = work_dir() / "metrics_kernel.jsonl";
    fs::remove(mk);
    const Result kernel = run(1, a + " --threads 2 --thread-split kernel --metrics " + mk.string());
    ASSERT_NE(kernel.output.find("kernels split over the threads"), npos) << kernel.output;
    const std::string kernel_records = capplan::test::read_text(mk);
    EXPECT_NE(kernel_records.find("\"batch_split\":1"), npos);
    EXPECT_EQ(kernel_records.find("split_wait_s"), npos);
    expect_close(one, kernel, 1e-5, "kernel split");
  }
  const Result one = run(1, common(true, 10));
  const std::string dp = common(true, 10) + " --dp 2 --mbs 2 --threads 2";
  const Result plain = run(2, dp);
  ASSERT_NE(plain.output.find("batch split"), npos) << plain.output;
  expect_close(one, plain, 1e-5, "dp 2, batch split in 2");
  expect_close(plain, run(2, dp + " --zero 1"), 0.0, "zero 1 vs plain dp, batch split in 2");
  // A killed batch-split run resumes from its checkpoint bitwise.
  const fs::path ck = work_dir() / "ckpt";
  fs::remove_all(ck);
  const std::string split2 = common(false, 10) + " --mbs 2 --threads 2";
  const Result straight = run(1, split2);
  const std::string saved = split2 + " --checkpoint-every 5 --checkpoint-dir " + ck.string();
  EXPECT_NE(run(1, saved + " --kill-at-step 6").status, 0);
  const Result resumed = run(1, saved + " --resume auto");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step 5"), npos) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 5u) << resumed.output;
  for (int step = 6; step <= 10; ++step)
    EXPECT_EQ(resumed.losses.at(step), straight.losses.at(step)) << "step " << step;
  // Layouts that exchange activations or weights inside the step split the kernels instead.
  const Result tp = run(2, common(false, 4) + " --tp 2 --mbs 2 --threads 2");
  EXPECT_NE(tp.output.find("kernels split over the threads"), npos) << tp.output;
}

// Step records carry the time rank 0 spent in GEMMs: part of forward + backward, so the report's
// GEMM share lies in (0, share_forward + share_backward].
TEST(RuntimeTrain, StepRecordsCarryGemmTime) {
  const fs::path m = work_dir() / "metrics.jsonl";
  fs::remove(m);
  const Result r = run(2, common(false, 4) + " --dp 2 --metrics " + m.string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto rep = capplan::rt::report_analyze_file(m.string());
  ASSERT_TRUE(rep.value.has_value()) << rep.diagnostics.to_string();
  const auto& s = rep.value->summary;
  EXPECT_EQ(s.steps, 4);
  EXPECT_GT(s.share_gemm, 0.0);
  EXPECT_LE(s.share_gemm, s.share_forward + s.share_backward + 1e-9);
}

// The "step" records of a metrics file, each with its line (for messages); a line that is not a
// JSON object fails the test.
std::vector<std::pair<capplan::Json, std::string>> step_records(const fs::path& metrics) {
  namespace k = capplan::rt::metrics_schema;
  std::vector<std::pair<capplan::Json, std::string>> out;
  std::istringstream lines(capplan::test::read_text(metrics));
  for (std::string line; std::getline(lines, line);) {
    std::optional<capplan::Json> v = capplan::json_parse(line);
    if (!v || !v->is_object()) {
      ADD_FAILURE() << metrics << ": not a JSON object: " << line;
      continue;
    }
    if (v->value(k::kType, "") == k::kStep) out.emplace_back(std::move(*v), line);
  }
  return out;
}

// Every step record times each term of the step apart (io/metrics_schema.h), and the terms with
// the remainder add up to the step: rank 0's intervals partition its step. A layout has time in
// the terms it uses (tp_comm with tp 2, pipeline communication and bubble with pp 2, DP
// communication with dp 2, recompute, offload) and exactly none in those it does not.
TEST(RuntimeTrain, StepRecordsTimeEveryTermApart) {
  namespace k = capplan::rt::metrics_schema;
  struct Case {
    int np;
    const char* flags;
    std::vector<const char*> used, unused;
  };
  const Case cases[] = {
      {4, " --tp 2 --pp 2 --recompute full", {k::kTpCommS, k::kPpCommS, k::kBubbleS, k::kRecomputeS},
       {k::kDpCommS, k::kOffloadS}},
      {2, " --dp 2 --zero 1 --recompute selective --offload", {k::kDpCommS, k::kRecomputeS, k::kOffloadS},
       {k::kTpCommS, k::kPpCommS, k::kBubbleS}},
      {1, "", {}, {k::kTpCommS, k::kPpCommS, k::kBubbleS, k::kDpCommS, k::kRecomputeS, k::kOffloadS}},
  };
  for (const Case& c : cases) {
    const fs::path m = work_dir() / "metrics.jsonl";
    fs::remove(m);
    const Result r = run(c.np, common(false, 4) + c.flags + " --metrics " + m.string());
    ASSERT_EQ(r.status, 0) << c.flags << "\n" << r.output;
    const std::vector<std::pair<capplan::Json, std::string>> records = step_records(m);
    for (const auto& [record, line] : records) {
      const capplan::Json* v = &record;
      const double step = capplan::json_double(*v, k::kStepTimeS, -1);
      double sum = 0;
      for (const char* part : k::kStepParts) {
        const double x = capplan::json_double(*v, part, std::nan(""));
        ASSERT_TRUE(std::isfinite(x)) << c.flags << ": " << part << " missing in " << line;
        EXPECT_GE(x, -1e-6) << c.flags << ": " << part << " in " << line;
        sum += x;
      }
      EXPECT_NEAR(sum, step, 1e-9 * step) << c.flags << ": Expectation the parts add up to step_time_s "
                                          << step << " Actual result " << sum << " in " << line;
      EXPECT_GT(capplan::json_double(*v, k::kComputeS, 0), 0.0) << line;
      EXPECT_GT(capplan::json_double(*v, k::kOptimizerS, 0), 0.0) << line;
      for (const char* used : c.used)
        EXPECT_GT(capplan::json_double(*v, used, 0), 0.0) << c.flags << ": " << used << " in " << line;
      for (const char* unused : c.unused)
        EXPECT_EQ(capplan::json_double(*v, unused, -1), 0.0) << c.flags << ": " << unused << " in " << line;
    }
    EXPECT_EQ(records.size(), 4u) << c.flags;
    // After each step, the cores' cache-line latency between the first two ranks, where the
    // node's ranks have a core each (two or more of them, no more than the cores).
    const bool latency = c.np >= 2 && c.np <= int(std::thread::hardware_concurrency());
    for (const auto& [record, line] : records) {
      const double ns = capplan::json_double(record, k::kCoreLatencyNs, -1);
      if (latency) {
        EXPECT_GT(ns, 0.0) << c.flags << ": " << line;
        EXPECT_LT(ns, 1e8) << c.flags << ": " << line;  // 0.1 s: a round trip that waited for a core
      } else {
        EXPECT_EQ(ns, -1) << c.flags << ": not measured with " << c.np << " ranks: " << line;
      }
    }
  }
}

// The step record's terms are those of the busiest rank (the critical path, as the prediction's
// are of the pacing stage): with pp 2 and an LM head over a 4096-word vocabulary five times a
// layer's work, the last stage (rank 1) computes more, and its terms come with its own step time,
// adding up to it; its waits for stage 0 (the first forward, the tied embedding's gradient after
// stage 0's last backward) are bubble, so what is left as pp_comm is the moving of messages.
// The losses are those of the same run on one rank.
TEST(RuntimeTrain, StepRecordsTakeTheBusiestRanksTerms) {
  namespace k = capplan::rt::metrics_schema;
  const fs::path model = work_dir() / "wide_head.yaml";
  {
    std::ofstream f(model);
    f << "name: wide-head\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 4096\nseq_len: 16\n";
  }
  const std::string args = "--model " + model.string() + " --gbs 8 --mbs 1 --steps 4 --lr 1e-2 --warmup 2 --seed 42";
  const fs::path m = work_dir() / "metrics.jsonl";
  fs::remove(m);
  const Result one = run(1, args);
  const Result r = run(2, args + " --pp 2 --metrics " + m.string());
  expect_close(one, r, 1e-5, "pp 2");
  const std::vector<std::pair<capplan::Json, std::string>> records = step_records(m);
  for (const auto& [record, line] : records) {
    const capplan::Json* v = &record;
    // Which rank computed longest is measured, and a loaded machine can stretch the lighter
    // stage's compute past the heavier one's, so the rank is not pinned: it is one of the two,
    // and the record's terms are that rank's own, adding up to its step time.
    const double terms_rank = capplan::json_double(*v, k::kTermsRank, -1);
    EXPECT_TRUE(terms_rank == 0.0 || terms_rank == 1.0) << line;
    double sum = 0;
    for (const char* part : k::kStepParts) sum += capplan::json_double(*v, part, std::nan(""));
    const double step_time = capplan::json_double(*v, k::kStepTimeS, -1);
    EXPECT_NEAR(sum, step_time, 1e-9 * step_time) << "Expectation: the parts add up to step_time_s in " << line;
    const double bubble = capplan::json_double(*v, k::kBubbleS, -1);
    const double pp_comm = capplan::json_double(*v, k::kPpCommS, -1);
    EXPECT_GT(bubble, 0.0) << line;
    EXPECT_GE(pp_comm, 0.0) << line;
  }
  EXPECT_EQ(records.size(), 4u);
}

// 20 steps straight vs 10 + SIGKILL of one rank at step 12 + relaunch with --resume auto, which
// continues from the step-10 checkpoint: steps 11..20 bitwise equal.
TEST(RuntimeTrain, KilledRunResumesBitwise) {
  const fs::path dir = work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string args = common(false) + " --dp 2 --zero 1 --checkpoint-every 10";
  const Result straight = run(2, args);
  ASSERT_EQ(straight.status, 0) << straight.output;
  const Result killed = run(2, args + " --checkpoint-dir " + dir.string() + " --kill-at-step 12");
  EXPECT_NE(killed.status, 0) << killed.output;
  EXPECT_TRUE(fs::exists(dir / "step-000010" / "manifest.json"));
  const Result resumed = run(2, args + " --checkpoint-dir " + dir.string() + " --resume auto");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step 10"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 10u) << resumed.output;
  for (int step = 11; step <= 20; ++step)
    EXPECT_EQ(resumed.losses.at(step), straight.losses.at(step)) << "step " << step;
  // --resume PATH names the step folder itself.
  const Result by_path =
      run(2, args + " --resume " + (dir / "step-000010").string());
  ASSERT_EQ(by_path.status, 0) << by_path.output;
  ASSERT_EQ(by_path.losses.size(), 10u) << by_path.output;
  for (int step = 11; step <= 20; ++step)
    EXPECT_EQ(by_path.losses.at(step), straight.losses.at(step)) << "step " << step;
  // A different layout cannot resume from these shards.
  const Result other = run(1, common(false) + " --checkpoint-dir " + dir.string());
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find("does not match"), std::string::npos) << other.output;
}

// Every factorisation of 8 ranks into D x P x T (1F1B unless another schedule is named,
// interleaved with vp 2 twice, sequence parallelism twice), ZeRO-1 and full recompute
// spread over them, and three placement orders: 20 steps within 1e-5 of one rank (same
// reasoning as above; pipeline stages and TP add only reordered fp32 sums).
class RuntimeLayouts8 : public ::testing::TestWithParam<const char*> {};

TEST_P(RuntimeLayouts8, LossesMatchSingleRank) {
  const std::string base = "--model " + deep_model_file() + " --gbs 8 --mbs 1 --steps 20 " +
                           "--lr 1e-2 --warmup 2 --seed 9";
  const Result ref = run(1, base);
  ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
  expect_close(ref, run(8, base + " " + GetParam()), 1e-5, GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Factorisations, RuntimeLayouts8,
    ::testing::Values("--dp 8", "--pp 8 --schedule gpipe --recompute full --offload", "--tp 8 --order TPD",
                      "--dp 4 --pp 2 --vp 2 --schedule interleaved --zero 1",
                      "--dp 4 --tp 2 --order TPD --recompute selective",
                      "--dp 2 --pp 4 --schedule gpipe --zero 1",
                      "--pp 4 --vp 2 --schedule interleaved --tp 2 --recompute full",
                      "--dp 2 --tp 4 --sp --zero 1 --order PTD", "--pp 2 --tp 4 --schedule gpipe",
                      "--dp 2 --pp 2 --tp 2 --sp --zero 1 --recompute full --order TPD"));

// ZeRO-3 checkpoints hold each rank's parameter shard (and Adam's): resuming from step 10
// continues bitwise.
TEST(RuntimeTrain, ZeroThreeResumesFromItsShardsBitwise) {
  const fs::path dir = work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string args = common(true) + " --dp 2 --zero 3 --checkpoint-every 10";
  const Result straight = run(2, args + " --checkpoint-dir " + dir.string());
  ASSERT_EQ(straight.status, 0) << straight.output;
  ASSERT_EQ(straight.losses.size(), 20u) << straight.output;
  const Result resumed = run(2, args + " --resume " + (dir / "step-000010").string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 10u) << resumed.output;
  for (int step = 11; step <= 20; ++step)
    EXPECT_EQ(resumed.losses.at(step), straight.losses.at(step)) << "step " << step;
}

// ZeRO-2 and 3 on 8 ranks (gbs 16: two micro-batches per DP rank, so the gradient shards
// accumulate over micro-batches), 10 steps. Against one rank: within 1e-5, as every layout.
// Against ZeRO-1: ZeRO-2 reduce-scatters each micro-batch's layer bucket and adds the DP sums of
// the micro-batches, where ZeRO-1 adds the micro-batches first and reduces once: the same fp32
// terms in another order, ~1 ulp per gradient element per step, measured <= 2e-8 relative on the
// losses after 20 steps; 1e-6 bounds it with room and still catches a missed or doubled bucket
// (errors of order 1e-3 or more). With one micro-batch per rank nothing is reordered: bitwise.
// ZeRO-3 computes exactly ZeRO-2's sums (the gathered weights are the same bits): bitwise.
class RuntimeZero8 : public ::testing::TestWithParam<const char*> {};

TEST_P(RuntimeZero8, StagesTwoAndThreeMatchStageOneAndSingleRank) {
  const std::string base = "--model " + deep_model_file() + " --mbs 1 --steps 10 " +
                           "--lr 1e-2 --warmup 2 --seed 9 " + GetParam();
  const Result ref = run(1, "--model " + deep_model_file() +
                                " --gbs 16 --mbs 1 --steps 10 --lr 1e-2 --warmup 2 --seed 9");
  ASSERT_EQ(ref.losses.size(), 10u) << ref.output;
  const Result z1 = run(8, base + " --gbs 16 --zero 1");
  const Result z2 = run(8, base + " --gbs 16 --zero 2");
  const Result z3 = run(8, base + " --gbs 16 --zero 3");
  expect_close(ref, z2, 1e-5, std::string(GetParam()) + " zero 2 vs one rank");
  expect_close(ref, z3, 1e-5, std::string(GetParam()) + " zero 3 vs one rank");
  expect_close(z1, z2, 1e-6, std::string(GetParam()) + " zero 2 vs zero 1");
  expect_close(z2, z3, 0.0, std::string(GetParam()) + " zero 3 vs zero 2");
  EXPECT_EQ(z3.output.find("warning"), std::string::npos) << z3.output;
  // One micro-batch per DP rank: no reordering at all (interleaving needs at least pp of them).
  if (std::strstr(GetParam(), "interleaved")) return;
  const int dp = std::atoi(std::strstr(GetParam(), "--dp ") + 5);
  const std::string one = " --gbs " + std::to_string(dp) + " --steps 5";
  const Result o1 = run(8, base + one + " --zero 1");
  expect_close(o1, run(8, base + one + " --zero 2"), 0.0, std::string(GetParam()) + " zero 2 m=1");
  expect_close(o1, run(8, base + one + " --zero 3"), 0.0, std::string(GetParam()) + " zero 3 m=1");
}

INSTANTIATE_TEST_SUITE_P(Layouts, RuntimeZero8,
                         ::testing::Values("--dp 8", "--dp 4 --tp 2 --order TPD",
                                           "--dp 2 --pp 2 --tp 2",
                                           "--dp 2 --pp 2 --tp 2 --sp --recompute full",
                                           "--dp 4 --pp 2 --vp 2 --schedule interleaved"));

struct RankMemory {
  double params = 0, param_buffers = 0, grads = 0, grad_buffers = 0, optimizer = 0;  // MiB
};

// The "memory per rank" lines capplan-train prints at start, by rank.
std::map<int, RankMemory> memory_lines(const Result& r) {
  std::map<int, RankMemory> out;
  std::istringstream is(r.output);
  for (std::string line; std::getline(is, line);) {
    int rank = 0, d = 0, p = 0, t = 0;
    RankMemory m;
    if (std::sscanf(line.c_str(),
                    " rank %d (d%d,p%d,t%d): parameters %lf MiB, gradients %lf MiB, optimizer "
                    "state %lf MiB, ZeRO buffers %*f MiB (gathered weights %lf + gradient buckets "
                    "%lf)",
                    &rank, &d, &p, &t, &m.params, &m.grads, &m.optimizer, &m.param_buffers,
                    &m.grad_buffers) == 9)
      out[rank] = m;
  }
  return out;
}

// Measured bytes per rank by kind (dp 8, eight layers): stage 1 holds whole weights and
// gradients; stage 2 keeps a 1/dp gradient shard, and besides it one layer's bucket and the
// embedding / final-norm gradients (ZeRO buffers); stage 3 does the same for the weights. The
// shards are exactly 1/dp of stage 1's buffers (printed to 1e-4 MiB), and shards plus buffers
// stay well under stage 1's.
TEST(RuntimeTrain, ZeroStagesShrinkWeightsAndGradientsPerRank) {
  const std::string base = "--model " + deep_model_file() + " --gbs 8 --mbs 1 --steps 1 --dp 8";
  std::map<int, std::map<int, RankMemory>> by_stage;
  for (int z : {1, 2, 3}) {
    const Result r = run(8, base + " --zero " + std::to_string(z));
    ASSERT_EQ(r.status, 0) << r.output;
    by_stage[z] = memory_lines(r);
    ASSERT_EQ(by_stage[z].size(), 8u) << r.output;
  }
  for (int rank = 0; rank < 8; ++rank) {
    const RankMemory& one = by_stage[1][rank];
    const RankMemory& two = by_stage[2][rank];
    const RankMemory& three = by_stage[3][rank];
    EXPECT_EQ(one.param_buffers, 0.0);
    EXPECT_EQ(one.grad_buffers, 0.0);
    EXPECT_NEAR(one.grads, one.params, 1e-4);
    // Optimizer: Adam's two moment shards and nothing else at every stage (stage 1 reduces the
    // gradients in place, so its DP-summed shard needs no buffer of its own).
    EXPECT_NEAR(one.optimizer, 2 * one.params / 8, 2e-4) << rank;
    EXPECT_NEAR(two.optimizer, one.optimizer, 1e-4) << rank;
    EXPECT_NEAR(three.optimizer, one.optimizer, 1e-4) << rank;
    // Stage 2: gradients sharded, weights whole.
    EXPECT_NEAR(two.params, one.params, 1e-4) << rank;
    EXPECT_EQ(two.param_buffers, 0.0) << rank;
    EXPECT_NEAR(two.grads, one.grads / 8, 2e-4) << rank;
    EXPECT_GT(two.grad_buffers, 0.0) << rank;
    EXPECT_LT(two.grads + two.grad_buffers, 0.5 * one.grads) << rank;
    // Stage 3: both sharded.
    EXPECT_NEAR(three.params, one.params / 8, 2e-4) << rank;
    EXPECT_GT(three.param_buffers, 0.0) << rank;
    EXPECT_LT(three.params + three.param_buffers, 0.5 * one.params) << rank;
    EXPECT_NEAR(three.grad_buffers, two.grad_buffers, 1e-4) << rank;
    EXPECT_NEAR(three.grads, two.grads, 1e-4) << rank;
  }
}

std::map<std::string, std::vector<double>> read_gradient_dump(const fs::path& path) {
  std::map<std::string, std::vector<double>> out;
  std::ifstream f(path);
  std::string name;
  size_t count = 0;
  while (f >> name >> count) {
    std::vector<double>& v = out[name];
    v.resize(count);
    for (double& x : v) f >> x;
  }
  return out;
}

// Gradients after step 1 (summed over DP), un-sharded from TP slices, pipeline stages and model
// chunks, against one rank's: relative Frobenius error per tensor <= 1e-5. The sums are the
// same fp32 terms in another order (measured ~5e-7); a slice put back in the wrong place or a
// missing TP/SP reduction gives errors of order 1.
TEST(RuntimeTrain, GradientsAfterStepOneMatchSingleRankUnsharded) {
  const fs::path dir = work_dir();
  // The Llama-style model's 8 heads are 6 wide (head_dim set apart, as Gemma's and Qwen3's are):
  // its Q and output projection are 48 wide over the 32-wide stream, sliced over tp by heads.
  const std::string llama = (dir / "tiny_deep_llama.yaml").string();
  {
    std::ofstream f(llama);
    f << "name: tiny-deep-llama\nlayers: 4\nhidden: 32\nheads: 8\nhead_dim: 6\nkv_heads: 4\nvocab: 97\n"
      << "seq_len: 16\nffn: swiglu\nnorm: rmsnorm\nposition: rope\n";
  }
  for (const auto& [model, layout] :
       {std::pair{deep_model_file(), std::string("--dp 2 --pp 2 --tp 2 --sp --zero 1")},
        std::pair{llama, std::string("--tp 4 --pp 2 --vp 2 --schedule interleaved")},
        std::pair{llama, std::string("--dp 4 --pp 2 --zero 3")},
        std::pair{deep_model_file(), std::string("--dp 2 --pp 2 --tp 2 --sp --zero 2")},
        // Ring attention's gradients, summed over dp x cp, learned positions and RoPE.
        std::pair{deep_model_file(), std::string("--dp 2 --cp 2 --tp 2")},
        std::pair{llama, std::string("--cp 4 --tp 2")}}) {
    const std::string base = "--model " + model + " --gbs 8 --steps 1 --seed 3 --dump-grads ";
    const Result ref = run(1, base + (dir / "ref.txt").string());
    ASSERT_EQ(ref.status, 0) << ref.output;
    const Result got = run(8, base + (dir / "got.txt").string() + " " + layout);
    ASSERT_EQ(got.status, 0) << got.output;
    const auto a = read_gradient_dump(dir / "ref.txt"), b = read_gradient_dump(dir / "got.txt");
    ASSERT_GT(a.size(), 10u);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, ga] : a) {
      const std::vector<double>& gb = b.at(name);
      ASSERT_EQ(ga.size(), gb.size()) << name;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < ga.size(); ++i) {
        diff += (ga[i] - gb[i]) * (ga[i] - gb[i]);
        norm += ga[i] * ga[i];
      }
      if (norm == 0) {  // RMSNorm models have no bias tensors: both must be empty of signal
        EXPECT_EQ(diff, 0.0) << name;
        continue;
      }
      EXPECT_LE(std::sqrt(diff / norm), 1e-5) << layout << " " << name;
    }
  }
}

void expect_bad(int np, const std::string& args, const std::string& message) {
  const Result r = run(np, args);
  EXPECT_NE(r.status, 0) << args << "\n" << r.output;
  EXPECT_LT(r.status, 124) << "did not exit cleanly (hang or crash): " << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos)
      << "Expectation: message containing '" << message << "'\nActual result:\n" << r.output;
  EXPECT_TRUE(r.losses.empty()) << r.output;
}

TEST(RuntimeTrain, BadInputStopsEveryRankWithAClearMessage) {
  const std::string m = " --model " + model_file(false);
  expect_bad(2, m + " --dp 2 --mbs 2 --gbs 6", "6 is not divisible by dp * mbs = 2 * 2 = 4");
  expect_bad(2, m + " --dp 4 --gbs 8", "does not match the 2 MPI ranks");
  expect_bad(3, m + " --tp 3 --gbs 3", "tp 3 does not divide heads 4");
  expect_bad(1, m + " --data " + (work_dir() / "no_such_dir").string(), "no_such_dir");
  expect_bad(1, m + " --stepz 3", "did you mean '--steps'?");
  expect_bad(4, m + " --pp 4 --gbs 4", "pp 4 is greater than the model's 2 layers");
  expect_bad(2, m + " --pp 2 --order DPX", "expected a permutation of D, P, T");
  expect_bad(2, m + " --pp 2 --vp 2 --schedule interleaved --gbs 2",
             "vp 2 does not divide the 1 layers per stage");
  // Context and expert parallelism.
  expect_bad(3, m + " --cp 3", "--cp: cp 3 does not split the sequence of 16 tokens into 2 * cp = 6");
  expect_bad(2, m + " --dp 2 --ep 2", "--ep: ep 2 needs a mixture-of-experts model");
  expect_bad(2, m + " --dp 2 --ep 4", "--ep: ep 4 does not divide dp * cp = 2 * 1 = 2");
  expect_bad(3, " --model " + moe_model_file(1.0) + " --dp 3 --ep 3 --gbs 3",
             "--ep: ep 3 does not divide the 4 experts");
  expect_bad(4, m + " --tp 2 --cp 2 --sp", "--cp: context parallelism with sequence parallelism");
  expect_bad(2, " --model " + moe_model_file(1.0) + " --dp 2 --zero 2", "--zero: mixture-of-experts models");
  expect_bad(1, m + " --moe-aux-loss-coeff -1", "--moe-aux-loss-coeff: must be >= 0");
  // A sliding window shorter than the sequence (the runtime's attention has none); one that
  // covers it trains.
  const fs::path windowed = work_dir() / "tiny_windowed.yaml";
  std::ofstream(windowed) << "name: tiny-windowed\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n"
                          << "sliding_window: 8\nglobal_every: 2\n";
  expect_bad(1, " --model " + windowed.string(), "sliding window of 8 tokens is shorter than the sequence of 16");
  const fs::path covering = work_dir() / "tiny_window_covers.yaml";
  std::ofstream(covering) << "name: tiny-window-covers\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n"
                          << "sliding_window: 16\n";
  const Result covered = run(1, " --model " + covering.string() + " --gbs 2 --steps 1");
  EXPECT_EQ(covered.status, 0) << covered.output;
  EXPECT_EQ(covered.losses.size(), 1u) << covered.output;
  // Latent attention (DeepSeek's MLA): the runtime projects Q, K and V from the hidden state.
  const fs::path latent = work_dir() / "tiny_latent.yaml";
  std::ofstream(latent) << "name: tiny-latent\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n"
                        << "mla:\n  kv_lora_rank: 8\n  qk_nope_head_dim: 8\n  v_head_dim: 8\n";
  expect_bad(1, " --model " + latent.string(), "multi-head latent attention (mla.kv_lora_rank 8)");
  // Chunked attention (Llama 4) shorter than the sequence: the runtime's attention has no chunks.
  const fs::path chunked = work_dir() / "tiny_chunked.yaml";
  std::ofstream(chunked) << "name: tiny-chunked\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n"
                         << "attention_chunk: 8\n";
  expect_bad(1, " --model " + chunked.string(), "attention chunks of 8 tokens are shorter than the sequence of 16");
  // Multi-token prediction (DeepSeek-V3's MTP): the runtime trains the next-token loss only.
  const fs::path mtp = work_dir() / "tiny_mtp.yaml";
  std::ofstream(mtp) << "name: tiny-mtp\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\nmtp_layers: 1\n";
  expect_bad(1, " --model " + mtp.string(), "multi-token prediction (mtp_layers 1)");
  // Two ranks started with different flags (MPMD launch): caught before any work.
  expect_bad(1, m + " --dp 2 --gbs 2 --steps 2 : -np 1 " + std::string(CAPPLAN_TRAIN) +
                    " --threads 1" + m + " --dp 2 --gbs 2 --steps 3",
             "the ranks were started with different flags");
  // A shard holding token 300 for a model with vocab 97.
  const fs::path data = work_dir() / "bad_tokens";
  fs::create_directories(data);
  std::vector<uint16_t> tokens(200, 5);
  tokens[17] = 300;
  capplan::Diagnostics d;
  ASSERT_TRUE(capplan::rt::shard_write(capplan::rt::shard_path(data.string(), 0), tokens, &d))
      << d.to_string();
  expect_bad(2, m + " --dp 2 --data " + data.string(), "300");
}

// ---- resume safety ----

// Expectation: with every completed checkpoint corrupt, --resume auto refuses (exit 2) and lists
// each one and why, instead of training from step 0 with exit 0; --allow-fresh-start trains from
// scratch, and its retention moves the corrupt folders aside into unverified/ instead of
// deleting them.
TEST(RuntimeTrain, AllCheckpointsCorruptRefusesAFreshStart) {
  const fs::path dir = work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string args = common(false, 4) + " --checkpoint-every 1 --checkpoint-dir " + dir.string();
  ASSERT_EQ(run(1, args).status, 0);
  // Steps 2, 3, 4 are kept (retention keeps 3); flip a byte of each shard's payload.
  for (const char* step : {"step-000002", "step-000003", "step-000004"}) {
    std::fstream f(dir / step / "rank-00000.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << step;
    f.seekp(100);
    f.put('\x7f');
  }
  const Result refused = run(1, args + " --resume auto");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_TRUE(refused.losses.empty()) << refused.output;
  for (const char* step : {"step-000002", "step-000003", "step-000004"})
    EXPECT_NE(refused.output.find(std::string(step) + ": rank-00000.ckpt: payload checksum mismatch"),
              std::string::npos)
        << step << "\n" << refused.output;
  EXPECT_NE(refused.output.find("every completed checkpoint (3) fails verification"),
            std::string::npos) << refused.output;
  // Nothing was deleted.
  for (const char* step : {"step-000002", "step-000003", "step-000004"})
    EXPECT_TRUE(fs::exists(dir / step / "rank-00000.ckpt")) << step;
  // Allowed: trains from step 0; the corrupt folders end up moved aside, none deleted.
  const Result fresh = run(1, common(false, 8) + " --checkpoint-every 1 --checkpoint-dir " +
                                  dir.string() + " --resume auto --allow-fresh-start --resume-override steps");
  ASSERT_EQ(fresh.status, 0) << fresh.output;
  EXPECT_EQ(fresh.losses.size(), 8u) << fresh.output;
  for (const char* step : {"step-000002", "step-000003", "step-000004"})
    EXPECT_TRUE(fs::exists(dir / "unverified" / step / "rank-00000.ckpt")) << step << "\n" << fresh.output;
}

// Expectation: a resumed run with another --gbs, --seed, --lr or --data is refused, naming each
// difference ("gbs: the checkpoint has 8, this run has 16"); --resume-override allows the
// optimizer's and data's (the run continues) but never gbs or seed.
TEST(RuntimeTrain, ResumeRefusesChangedTrainingFlags) {
  const fs::path dir = work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string model = "--model " + model_file(false) + " --mbs 1 --steps 4 --warmup 2 ";
  const std::string ck = " --checkpoint-every 2 --checkpoint-dir " + dir.string();
  ASSERT_EQ(run(1, model + "--gbs 8 --lr 1e-2 --seed 42" + ck + " --kill-at-step 3").status != 0, true);
  ASSERT_TRUE(fs::exists(dir / "step-000002" / "manifest.json"));
  const Result changed = run(1, model + "--gbs 16 --lr 2e-2 --seed 7" + ck);
  EXPECT_EQ(changed.status, 2) << changed.output;
  for (const char* part : {"gbs: the checkpoint has 8, this run has 16",
                           "seed: the checkpoint has 42, this run has 7",
                           "lr: the checkpoint has 0.01, this run has 0.02",
                           "pass --resume-override lr to continue with the new value"})
    EXPECT_NE(changed.output.find(part), std::string::npos) << part << "\n" << changed.output;
  EXPECT_TRUE(changed.losses.empty()) << changed.output;
  const Result gbs = run(1, model + "--gbs 16 --lr 1e-2 --seed 42" + ck + " --resume-override gbs");
  EXPECT_EQ(gbs.status, 2) << gbs.output;
  EXPECT_NE(gbs.output.find("'gbs' cannot be overridden"), std::string::npos) << gbs.output;
  const Result lr = run(1, model + "--gbs 8 --lr 2e-2 --seed 42" + ck + " --resume-override lr");
  ASSERT_EQ(lr.status, 0) << lr.output;
  EXPECT_NE(lr.output.find("resumed from step 2"), std::string::npos) << lr.output;
  EXPECT_NE(lr.output.find("lr: the checkpoint has 0.01, this run has 0.02 (overridden)"),
            std::string::npos) << lr.output;
}

// Expectation: each of these is refused at start with exit 2 and the reason, before any step.
TEST(RuntimeTrain, BadCheckpointDirDataAndSpAreRefusedAtStart) {
  const std::string m = " --model " + model_file(false) + " --steps 2";
  // --checkpoint-dir names a file: refused now, not at the first save.
  const fs::path file = work_dir() / "a_file";
  std::ofstream(file) << "x";
  expect_bad(1, m + " --checkpoint-dir " + file.string(), "--checkpoint-dir: exists and is not a folder");
  // --sp needs tp > 1 (the planner refuses it too).
  expect_bad(1, m + " --sp", "--sp: sequence parallelism splits the sequence over the tp group");
  // A --resume PATH that does not exist is named as such (not "no manifest (torn...)").
  expect_bad(1, m + " --resume " + (work_dir() / "nowhere").string(), "no such checkpoint folder");
  // Shard entries that are a dangling symlink, a folder and a FIFO are refused by name.
  const fs::path data = work_dir() / "odd_shards";
  fs::remove_all(data);
  fs::create_directories(data / "shard_002.bin");
  capplan::Diagnostics d;
  ASSERT_TRUE(capplan::rt::shard_write((data / "shard_000.bin").string(),
                                       std::vector<uint16_t>(200, 5), &d)) << d.to_string();
  fs::create_symlink(data / "missing.bin", data / "shard_001.bin");
  ASSERT_EQ(::mkfifo((data / "shard_003.bin").c_str(), 0600), 0);
  const Result r = run(1, m + " --data " + data.string());
  EXPECT_EQ(r.status, 2) << r.output;
  for (const char* part : {"shard_001.bin: error: token shard is a dangling symlink",
                           "shard_002.bin: error: token shard is not a regular file (a folder)",
                           "shard_003.bin: error: token shard is not a regular file (a FIFO)"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
}

}  // namespace
