// capplan-train on the CUDA backend under mpirun. Label gpu: 20 steps of a tiny model, CPU fp32
// against CUDA fp32 (losses within 1e-4 relative) and CUDA bf16 (2e-2); a kill and --resume auto
// bitwise equal to an uninterrupted GPU run; dp 2 over NCCL where two GPUs are visible. Each test
// skips, saying why, without a device. (The bad-input cases that need no GPU are in
// test_runtime_backend.cpp, label mpi.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/train/train_process.h"
#include "train/cuda_backend.h"

namespace capplan::rt {
namespace {

namespace fs = std::filesystem;
using testing::run_train;
using testing::TrainResult;

std::string no_gpu_reason(int needed = 1) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n >= needed) return "";
  return n == 0 ? why : std::to_string(n) + " CUDA device(s) visible, " + std::to_string(needed) + " needed";
}

std::string tiny_args(bool llama) {
  return "--model " + testing::tiny_model_file(llama) + " --gbs 8 --mbs 2 --steps 20 --lr 1e-2 --warmup 2 --seed 42";
}

void expect_losses_close(const TrainResult& ref, const TrainResult& got, double rel, const std::string& what) {
  ASSERT_EQ(ref.status, 0) << ref.output;
  ASSERT_EQ(got.status, 0) << what << "\n" << got.output;
  ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
  ASSERT_EQ(got.losses.size(), 20u) << got.output;
  for (const auto& [step, loss] : ref.losses)
    EXPECT_LE(std::abs(got.losses.at(step) - loss), rel * std::abs(loss))
        << what << " step " << step << ": Expectation " << loss << " Actual result " << got.losses.at(step);
}

// Expectation: fp32 GEMMs without TF32 and fp32 kernels add the same terms as the CPU in another
// order (~1e-7 relative per step); 20 AdamW steps stay within 1e-4. bf16 operands round to 8
// bits of mantissa (~4e-3 per product), which moves the loss by at most ~1e-2 over 20 steps.
TEST(RuntimeGpu, TwentyStepsMatchTheCpu) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  for (bool llama : {false, true}) {
    const std::string a = tiny_args(llama);
    const TrainResult cpu = run_train(1, a + " --backend cpu");
    expect_losses_close(cpu, run_train(1, a + " --backend cuda --precision fp32"), 1e-4,
                        llama ? "llama fp32" : "gpt fp32");
    if (cuda_device_info(0).bf16)
      expect_losses_close(cpu, run_train(1, a + " --backend cuda --precision bf16"), 2e-2,
                          llama ? "llama bf16" : "gpt bf16");
  }
}

// Expectation: the start line names the backend and the device.
TEST(RuntimeGpu, StartLineNamesTheDevice) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const TrainResult r = run_train(1, tiny_args(false) + " --steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("backend cuda: " + cuda_device_info(0).name), std::string::npos) << r.output;
}

// Expectation: every kernel is deterministic (no atomics), so steps 11-20 after a kill at 12 and
// --resume auto from step 10 equal the uninterrupted run's bit for bit.
TEST(RuntimeGpu, KilledRunResumesBitwise) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = testing::train_work_dir() / "ckpt";
  fs::remove_all(dir);
  const std::string args = tiny_args(false) + " --backend cuda --checkpoint-every 10";
  const TrainResult straight = run_train(1, args);
  ASSERT_EQ(straight.status, 0) << straight.output;
  const TrainResult killed = run_train(1, args + " --checkpoint-dir " + dir.string() + " --kill-at-step 12");
  EXPECT_NE(killed.status, 0) << killed.output;
  const TrainResult resumed = run_train(1, args + " --checkpoint-dir " + dir.string() + " --resume auto");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step 10"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 10u) << resumed.output;
  for (int step = 11; step <= 20; ++step) EXPECT_EQ(resumed.losses.at(step), straight.losses.at(step)) << step;
}

// Expectation: dp 2 over NCCL gives the losses of one GPU within 1e-4 (the same sums, reduced
// across two ranks in another order).
TEST(RuntimeGpu, DataParallelOverNcclMatchesOneGpu) {
  if (const std::string why = no_gpu_reason(2); !why.empty()) GTEST_SKIP() << why;
  const std::string a = tiny_args(false) + " --backend cuda --precision fp32";
  expect_losses_close(run_train(1, a), run_train(2, a + " --dp 2"), 1e-4, "dp 2 nccl");
}

}  // namespace
}  // namespace capplan::rt
