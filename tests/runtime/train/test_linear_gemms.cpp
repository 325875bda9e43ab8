// A Linear's three GEMMs as the model runs them and the device profile times them (LinearGemms,
// train/gpt.h): the weight kept [out, in], y = x W^T, dx = dy W, dW += dy^T x; the LM head a
// chunk of rows at a time (lm_head_chunk_rows).
#include <gtest/gtest.h>

#include <vector>

#include "train/backend.h"
#include "train/gpt.h"

namespace capplan::rt {
namespace {

TEST(LinearGemms, WeightKeptOutByInAndItsGradientAccumulates) {
  // Expectation by hand, rows 2, in 3, out 2: x = [[1, 2, 3], [4, 5, 6]], W = [[1, 0, 1],
  // [0, 2, 0]] ([out, in]). y = x W^T = [[1+3, 4], [4+6, 10]] = [[4, 4], [10, 10]].
  // dy = [[1, 2], [3, 4]]: dx = dy W = [[1, 4, 1], [3, 8, 3]]; dy^T x = [[1+12, 2+15, 3+18],
  // [2+16, 4+20, 6+24]] = [[13, 17, 21], [18, 24, 30]], added to what dW held (1 everywhere).
  auto be = make_cpu_backend(1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, w = {1, 0, 1, 0, 2, 0}, dy = {1, 2, 3, 4};
  std::vector<float> y(4, -1), dx(6, -1), dw(6, 1);
  const LinearGemms g{be.get(), 2, 3, 2};
  g.forward(y.data(), x.data(), w.data());
  g.input_gradient(dx.data(), dy.data(), w.data());
  g.weight_gradient(dw.data(), dy.data(), x.data());
  EXPECT_EQ(y, (std::vector<float>{4, 4, 10, 10}));
  EXPECT_EQ(dx, (std::vector<float>{1, 4, 1, 3, 8, 3}));
  EXPECT_EQ(dw, (std::vector<float>{14, 18, 22, 19, 25, 31}));
  // A put-off weight gradient runs the same call: c[M=out, N=in] += a^T b over K = rows.
  DeferredGemm{dw.data(), dy.data(), x.data(), 2, 3, 2}.run(*be);
  EXPECT_EQ(dw, (std::vector<float>{27, 35, 43, 37, 49, 61}));
}

TEST(LinearGemms, TheLmHeadRunsInChunksOfAboutEightMiBOfLogits) {
  // Expectation: (2 << 20) / vocab floats a chunk, rounded down to a multiple of 64 rows, at
  // least 128, at most the rows. Vocab 4096: 512 rows, so 256 rows are one chunk and 2048 rows
  // four. Vocab 50257: 41 rows, so the 128-row floor. A configured chunk wins, up to the rows.
  EXPECT_EQ(lm_head_chunk_rows(256, 4096), 256);
  EXPECT_EQ(lm_head_chunk_rows(2048, 4096), 512);
  EXPECT_EQ(lm_head_chunk_rows(2048, 50257), 128);
  EXPECT_EQ(lm_head_chunk_rows(100, 50257), 100);
  EXPECT_EQ(lm_head_chunk_rows(2048, 50257, 300), 300);
  EXPECT_EQ(lm_head_chunk_rows(256, 50257, 300), 256);
}

}  // namespace
}  // namespace capplan::rt
