// --backend and --precision under mpirun, on any machine: the mistakes stop every rank with exit
// status 2 and a message naming the flag, and auto takes the CPU where no GPU is visible.
#include <gtest/gtest.h>

#include "runtime/train/train_process.h"
#include "train/cuda_backend.h"

namespace capplan::rt {
namespace {

using testing::run_train;
using testing::TrainResult;

void expect_refused(int np, const std::string& args, const std::string& message) {
  const TrainResult r = run_train(np, "--model " + testing::tiny_model_file(false) + " --steps 2 " + args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos)
      << "Expectation: a message containing '" << message << "'\nActual result:\n" << r.output;
  EXPECT_TRUE(r.losses.empty()) << r.output;
}

// Expectation: without a device, --backend cuda is refused on both ranks with the reason (no
// device, or this build has no CUDA); with devices, more ranks than GPUs on the node is.
TEST(RuntimeBackend, CudaWithoutADeviceOrWithTooManyRanksIsRefused) {
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (gpus == 0) {
    expect_refused(2, "--dp 2 --backend cuda", "--backend: cuda: " + why);
  } else {
    expect_refused(gpus + 1, "--dp " + std::to_string(gpus + 1) + " --backend cuda",
                   std::to_string(gpus + 1) + " ranks on this node but " + std::to_string(gpus) + " GPUs visible");
  }
}

// Expectation: a backend or precision the trainer does not know, and bf16 on the CPU backend,
// are flag errors (exit 2) naming the flag and what was found.
TEST(RuntimeBackend, UnknownBackendAndCpuBf16AreFlagErrors) {
  expect_refused(1, "--backend tpu", "--backend: expected auto, cpu or cuda, found 'tpu'");
  expect_refused(1, "--precision fp8", "--precision: expected bf16, fp16 or fp32, found 'fp8'");
  expect_refused(1, "--backend cpu --precision bf16", "the CPU backend computes in fp32, found 'bf16'");
}

// Expectation: with no device visible, auto trains on the CPU and says so in the start line.
TEST(RuntimeBackend, AutoTakesTheCpuWithoutADevice) {
  std::string why;
  if (cuda_device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is visible: auto takes it";
  const TrainResult r = run_train(1, "--model " + testing::tiny_model_file(false) + " --steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("backend cpu"), std::string::npos) << r.output;
  EXPECT_EQ(r.losses.size(), 2u) << r.output;
}

}  // namespace
}  // namespace capplan::rt
