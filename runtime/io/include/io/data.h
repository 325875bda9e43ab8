// Training data for capplan-train: token shards on disk in the llm.c `.bin` layout, a writer that
// splits a token stream into ~1 GiB shards atomically, and DataSource, which hands out sample i of
// the *global* sample order (a seeded, per-epoch permutation of the dataset's windows). Each DP
// rank asks only for its slice of each global batch, so every layout sees the same global batch and
// the position in the data is a pure function of the step. No MPI, no model code here.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/random.h"

namespace capplan::rt {

// --- Shard files (llm.c layout, dev/data/data_common.py: write_datafile) ---------------------
// Header: 256 x int32 little-endian: [0] magic 20240520, [1] version 1, [2] token count; the rest 0.
// Body: `token count` x uint16 little-endian tokens. File size = 1024 + 2 * token count exactly.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;
inline constexpr int64_t kDefaultShardBytes = int64_t(1) << 30;  // ~1 GiB per shard file

struct ShardHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t num_tokens = 0;  // header[2], read as a non-negative int32
};

// Reads and checks the header of `path` (magic, version, file size = 1024 + 2 * tokens).
// On error returns false and adds a diagnostic naming the file, the byte offset and the reason.
bool shard_read_header(const std::string& path, ShardHeader* header, Diagnostics* diags);

// Reads a whole shard and checks every token < vocab (vocab <= 0: no check). Errors name the file
// and the byte offset of the first bad token ("token 300 >= vocab 256 at byte offset 1030").
bool shard_read(const std::string& path, int vocab, std::vector<uint16_t>* tokens,
                Diagnostics* diags);

// Writes one shard atomically (planner/atomic_file.h: temporary name, fsync, rename, folder fsync).
// Tokens must fit in int32 count (< 2^31). Returns false with a diagnostic on I/O failure.
bool shard_write(const std::string& path, std::span<const uint16_t> tokens, Diagnostics* diags);

// Shard file names in a dataset directory: `<dir>/shard_000000.bin`, `shard_000001.bin`, ...
std::string shard_path(const std::string& dir, int index);

// Lists the `*.bin` files in `dir`, sorted by name (the dataset's order). Error if `dir` is missing
// or holds no `.bin` file.
bool dataset_list_shards(const std::string& dir, std::vector<std::string>* paths, Diagnostics* diags);

// Splits a token stream into shards of at most `shard_bytes` bytes each (header included, so
// (shard_bytes - 1024) / 2 tokens per shard), written with shard_write. Tokens are appended with
// add(); finish() writes the last partial shard. Files are named by shard_path().
class ShardWriter {
 public:
  ShardWriter(std::string dir, int64_t shard_bytes = kDefaultShardBytes);
  bool add(std::span<const uint16_t> tokens, Diagnostics* diags);
  bool finish(Diagnostics* diags);
  int shards_written() const { return shards_written_; }
  int64_t tokens_written() const { return tokens_written_; }

 private:
  bool flush(Diagnostics* diags);
  std::string dir_;
  int64_t tokens_per_shard_ = 0;
  std::vector<uint16_t> buffer_;
  int shards_written_ = 0;
  int64_t tokens_written_ = 0;
};

// --- Sample order -------------------------------------------------------------------------------
// The order comes from splitmix64 (planner/random.h), the only randomness of the data path.

// Permutation of [0, n) for (seed, epoch): Fisher-Yates from the last index down, j drawn
// uniformly in [0, i] by rejection sampling from splitmix64 seeded with
// seed ^ (0x9E3779B97F4A7C15 * (epoch + 1)).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Global sample index of the `i`-th sample (0 <= i < gbs / dp) that DP rank `dp_rank` trains on
// at optimizer step `step` (0-based): step * gbs + dp_rank * (gbs / dp) + i. Ranks read disjoint
// contiguous slices of each global batch; the union over ranks is the same for every dp.
int64_t global_sample_index(int64_t step, int64_t gbs, int dp, int dp_rank, int64_t i);

// --- DataSource ---------------------------------------------------------------------------------
// A dataset is a list of windows of seq_len + 1 tokens (inputs t[0..seq_len-1], targets
// t[1..seq_len]). In a shard of n tokens, window k starts at token k * seq_len (windows overlap by
// one token, as llm.c's loader does) and there are (n - 1) / seq_len of them; windows never cross
// shard files. Sample g of the global order is window perm_e[g mod W] of epoch e = g / W, where W is
// the number of windows and perm_e = epoch_permutation(W, seed, e).
struct DataConfig {
  std::string source;  // a directory of .bin shards, or "synthetic"
  int seq_len = 0;     // tokens per sample (a sample carries seq_len + 1 tokens)
  int vocab = 0;       // every token must be < vocab
  uint64_t seed = 0;   // shuffling seed (and the synthetic tokens' seed)
  int64_t synthetic_windows = 1024;  // synthetic: windows in the dataset (then epochs repeat)
  bool check_tokens = true;          // scan every shard for token >= vocab when opening
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  int seq_len() const { return seq_len_; }
  int vocab() const { return vocab_; }
  int64_t num_windows() const { return num_windows_; }  // W, windows per epoch
  // Writes the seq_len + 1 tokens of global sample `global_index` (>= 0) to out[0..seq_len].
  // Thread-compatible: concurrent calls on one object need external locking.
  virtual void sample(int64_t global_index, int32_t* out) = 0;
  // Window (0 <= w < W) of a global sample index, per the order above.
  int64_t window_of(int64_t global_index);
  // Human-readable description for logs ("12 shards, 3,221,225,472 tokens, 3,145,727 windows").
  virtual std::string describe() const = 0;

 protected:
  int seq_len_ = 0;
  int vocab_ = 0;
  uint64_t seed_ = 0;
  int64_t num_windows_ = 0;

 private:
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

// Opens a dataset directory (or "synthetic"). Errors (missing directory, no shards, bad magic,
// truncated file, token >= vocab, fewer tokens than one window) are all collected in `diags`, each
// naming its file and byte offset; returns nullptr when there is any error.
// Synthetic: synthetic_windows windows of uniform random tokens in [0, vocab); token p of window w
// is splitmix64 of state seed ^ (w * (seq_len + 1) + p) * 0xD1B54A32D192ED03, modulo vocab.
std::unique_ptr<DataSource> data_open(const DataConfig& config, Diagnostics* diags);

// `capplan-train data prepare --text FILE... --out DIR [--shard-bytes N]`: byte-level tokenizer
// (token = byte value, vocab 256), files concatenated in the given order, shards written by
// ShardWriter. argv[0] is the command name ("prepare"); options follow. Returns 0 on success,
// 2 on bad input (diagnostics on stderr), 1 on I/O failure.
int data_prepare_main(int argc, char** argv);

}  // namespace capplan::rt
