// Throughput of the runtime's I/O path: CRC32C, checkpoint shard write (with fsync), verify and
// read, and DataSource::sample. Figures are printed by Google Benchmark; nothing is asserted.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "io/checkpoint.h"
#include "io/data.h"

namespace fs = std::filesystem;
using namespace capplan::rt;

namespace {

fs::path scratch(const char* name) {
  fs::path d = fs::temp_directory_path() / ("capplan_bench_io_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void BM_Crc32c(benchmark::State& state) {
  std::vector<unsigned char> buf(size_t(state.range(0)), 0x5A);
  uint32_t c = 0;
  for (auto _ : state) benchmark::DoNotOptimize(c = crc32c(buf.data(), buf.size(), c));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(1 << 20)->Arg(64 << 20);

void BM_CheckpointWriteShard(benchmark::State& state) {
  const auto dir = scratch("write");
  std::vector<float> w(size_t(state.range(0)) / 4, 0.5f);
  std::vector<TensorView> t = {{"params", w.data(), int64_t(w.size())}};
  std::string err;
  int64_t step = 0;
  for (auto _ : state) {
    if (!checkpoint_write_shard(dir.string(), step++ % 4, 0, {{"model", "bench"}}, t, &err))
      state.SkipWithError(err.c_str());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
  fs::remove_all(dir);
}
BENCHMARK(BM_CheckpointWriteShard)->Arg(64 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CheckpointVerifyAndRead(benchmark::State& state) {
  const auto dir = scratch("read");
  std::vector<float> w(size_t(state.range(0)) / 4, 0.5f);
  std::vector<TensorView> t = {{"params", w.data(), int64_t(w.size())}};
  std::string err;
  auto e = checkpoint_write_shard(dir.string(), 1, 0, {}, t, &err);
  checkpoint_write_manifest(dir.string(), 1, 1, {}, {*e}, &err);
  for (auto _ : state) {
    auto found = checkpoint_find_latest_good(dir.string(), {});
    auto shard = checkpoint_read_shard(found.step_dir + "/" + checkpoint_shard_name(0), &err);
    if (!shard) state.SkipWithError(err.c_str());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
  fs::remove_all(dir);
}
BENCHMARK(BM_CheckpointVerifyAndRead)->Arg(64 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DataSourceSample(benchmark::State& state) {
  const auto dir = scratch("data");
  std::vector<uint16_t> tokens(size_t(16) << 20);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 2654435761u) % 50257);
  capplan::Diagnostics d;
  shard_write(shard_path(dir.string(), 0), tokens, &d);
  DataConfig c;
  c.source = dir.string();
  c.seq_len = int(state.range(0));
  c.vocab = 50257;
  c.seed = 1;
  auto src = data_open(c, &d);
  std::vector<int32_t> out(size_t(c.seq_len) + 1);
  int64_t g = 0;
  for (auto _ : state) src->sample(g++, out.data());
  state.SetItemsProcessed(int64_t(state.iterations()) * (c.seq_len + 1));  // tokens
  fs::remove_all(dir);
}
BENCHMARK(BM_DataSourceSample)->Arg(1024);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(scratch("").parent_path(), ec);
  return 0;
}
