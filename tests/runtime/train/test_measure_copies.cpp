// How many copies of a kernel's operands `capplan-train measure` cycles through: enough that one
// pass over the model's GEMM operands goes through the caches between two uses of a copy, as in
// a training step, and no more than fill the last-level cache twice.
#include <gtest/gtest.h>

#include <limits>

#include "train/measure.h"

namespace capplan::rt {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

TEST(MeasureCopies, APassOverTheModelGoesThroughTheCachesBetweenTwoUses) {
  // Expectation, the 4-layer, 256-wide model (ffn 1024) at 256 tokens, fp32: a layer's GEMM
  // operands (X, W, Y of each Linear) are 4 x (256x256 + 256x768 + 256x768 [qkv]
  // + 256x256 + 256x256 + 256x256 [out] + 256x256 + 256x1024 + 256x1024 [fc1]
  // + 256x1024 + 1024x256 + 256x256 [fc2]) = 4 x 1,835,008 bytes = 7 MiB; the pass over 4 layers
  // is 28 MiB. The qkv GEMM's own operands are 4 x 458,752 bytes = 1.75 MiB: 16 copies, under
  // the 37 that would fill a 32 MiB cache twice.
  const double qkv = 1.75 * kMiB, pass = 28 * kMiB, llc = 32 * kMiB;
  EXPECT_EQ(cold_operand_copies(pass, qkv, llc), 16);
  // A whole layer's operands cycle one copy per layer: 4.
  EXPECT_EQ(cold_operand_copies(pass, 7 * kMiB, llc), 4);
  // The LM head (256 x 4096: 4 x (256x256 + 256x4096 + 256x4096) bytes = 8.25 MiB): 4 copies.
  EXPECT_EQ(cold_operand_copies(pass, 8.25 * kMiB, llc), 4);
}

TEST(MeasureCopies, NoMoreThanFillTheLastLevelCacheTwice) {
  // Expectation: a 1 GiB pass over 1 MiB operands would take 1024 copies; twice a 32 MiB cache
  // is 64 MiB, so 64; with an 8 MiB cache, 16.
  EXPECT_EQ(cold_operand_copies(1024 * kMiB, kMiB, 32 * kMiB), 64);
  EXPECT_EQ(cold_operand_copies(1024 * kMiB, kMiB, 8 * kMiB), 16);
  // Operands larger than the pass or the cache: one copy, never none.
  EXPECT_EQ(cold_operand_copies(kMiB, 4 * kMiB, 32 * kMiB), 1);
  EXPECT_EQ(cold_operand_copies(0, kMiB, 32 * kMiB), 1);
  // Tiny or zero-byte operands are capped at 64 copies; a pass of no finite size gives 1.
  EXPECT_EQ(cold_operand_copies(1e12, 1, 1e12), 64);
  EXPECT_EQ(cold_operand_copies(kMiB, 0, 32 * kMiB), 64);
  EXPECT_EQ(cold_operand_copies(std::numeric_limits<double>::quiet_NaN(), kMiB, 32 * kMiB), 1);
}

}  // namespace
}  // namespace capplan::rt
