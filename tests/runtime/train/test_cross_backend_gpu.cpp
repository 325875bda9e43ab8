// Label gpu: the cross-backend harness with the CUDA backend under test and the CPU backend as
// the reference, every kernel on random inputs (tolerances of the issue: fp32 1e-5 relative,
// bf16 GEMMs 2e-2). Skips, saying why, where no CUDA device is visible or CUDA was not built.
#include <gtest/gtest.h>

#include "runtime/train/cross_backend.h"
#include "train/cuda_backend.h"

namespace capplan::rt {
namespace {

std::string no_gpu_reason() {
  std::string why;
  return cuda_device_count(&why) > 0 ? std::string() : why;
}

void expect_all_within(GemmPrecision precision, double tolerance) {
  CudaBackendOptions o;
  o.precision = precision;
  o.pool_bytes = int64_t(256) << 20;
  auto gpu = make_cuda_backend(o);
  auto cpu = make_cpu_backend(1);
  const auto results = testing::compare_backends(*cpu, *gpu, tolerance);
  ASSERT_GE(results.size(), 14u);
  for (const auto& r : results) {
    std::printf("  %-60s error %.3g (tolerance %.0e)\n", r.kernel.c_str(), r.error, tolerance);
    EXPECT_TRUE(r.ok) << r.kernel << ": Expectation error <= " << tolerance << ", Actual result " << r.error;
  }
}

TEST(CrossBackendGpu, CudaFp32AgainstCpu) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  expect_all_within(GemmPrecision::Fp32, 1e-5);
}

TEST(CrossBackendGpu, CudaBf16AgainstCpu) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  if (!cuda_device_info(0).bf16) GTEST_SKIP() << cuda_device_info(0).name << " has no bf16";
  expect_all_within(GemmPrecision::Bf16, 2e-2);
}

// Expectation: the pool gives back what it lent (the same address after a release, a larger
// block after neighbours merge), and a request beyond it fails with the sizes in the message.
TEST(CrossBackendGpu, DevicePoolReusesAndReportsExhaustion) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  CudaBackendOptions o;
  o.pool_bytes = int64_t(64) << 20;
  auto gpu = make_cuda_backend(o);
  float* a = gpu->allocate(1 << 20);
  float* b = gpu->allocate(1 << 20);
  gpu->release(a);
  gpu->release(b);
  float* c = gpu->allocate(2 << 20);  // fits only where a and b were, merged
  EXPECT_EQ(c, a);
  try {
    gpu->allocate(int64_t(1) << 26);
    ADD_FAILURE() << "256 MiB from a 64 MiB pool did not fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  gpu->release(c);
}

}  // namespace
}  // namespace capplan::rt
