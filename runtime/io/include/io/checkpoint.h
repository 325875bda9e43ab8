// Crash-safe checkpoints for capplan-train. Each rank writes one shard file per checkpoint (named
// fp32 tensors: weights and optimizer state; key/values: RNG state, data position, step, layout)
// atomically with a CRC32C checksum; rank 0 then writes a manifest listing every shard and its
// checksum. find_latest_good() returns the newest checkpoint whose manifest and shards all verify,
// skipping torn or corrupt ones with a warning. No MPI here: the trainer does the barrier.
//
// On disk:  <dir>/step-000010/rank-00000.ckpt ... rank-NNNNN.ckpt, then manifest.json (last).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace capplan::rt {

// Free-form metadata stored in each shard and in the manifest. Keys the trainer should set:
// "model" (a fingerprint of the model spec), "dp", "tp", "pp", "zero", "world" (layout), "step",
// "data_position" (next global sample index), "rng" (generator state, hex).
using KeyValues = std::map<std::string, std::string>;

struct TensorView {  // for writing: points into the trainer's buffers, no copy
  std::string name;
  const float* data = nullptr;
  int64_t count = 0;  // number of floats
};

struct Tensor {  // for reading: owns its data
  std::string name;
  std::vector<float> data;
};

struct CheckpointShard {
  KeyValues meta;
  std::vector<Tensor> tensors;  // in the order written
  const Tensor* find(const std::string& name) const;
};

struct ShardEntry {  // one line of the manifest
  int rank = 0;
  std::string file;       // file name inside the step folder ("rank-00003.ckpt")
  uint64_t bytes = 0;     // file size
  uint32_t crc32c = 0;    // of the payload (everything after the 32-byte file header)
};

struct Manifest {
  int64_t step = 0;
  int world = 0;
  KeyValues meta;  // rank 0's metadata (model, layout, ...)
  std::vector<ShardEntry> shards;  // one per rank, rank order
};

struct LatestGood {
  std::optional<Manifest> manifest;  // nullopt: no usable checkpoint (a fresh start)
  std::string step_dir;              // "<dir>/step-000010" when found
  std::vector<std::string> warnings; // one per skipped checkpoint, naming the folder and why
  // The skipped folders that have a manifest (completed saves that now fail verification), as
  // "<folder>: why"; torn folders (no manifest: a save that never completed) are not listed.
  std::vector<std::string> failed;
  std::vector<std::string> failed_dirs;  // the same folders, as paths
  std::string error;                 // non-empty: the newest good one is from another model/layout
};

// CRC32C (Castagnoli, polynomial 0x1EDC6F41 reflected = 0x82F63B78), as in iSCSI / ext4.
// crc32c("123456789") = 0xE3069283. `crc` chains calls: crc32c(b, crc32c(a)) = crc32c(a + b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// The same by the table-driven method crc32c() falls back to on CPUs without SSE4.2 (the tests
// check one against the other).
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);

// "<dir>/step-000010" (zero-padded to 6 digits; wider steps keep all their digits).
std::string checkpoint_step_dir(const std::string& dir, int64_t step);
std::string checkpoint_shard_name(int rank);  // "rank-00003.ckpt"

// Writes this rank's shard for `step` atomically (temp file, fsync, rename, fsync of the folder);
// creates the folders as needed. The stored meta also gets "step" and "rank" (overwriting any
// given). Rank 0 first removes a stale manifest of the same step, so a
// half-rewritten folder is never taken as good. Returns the manifest entry, or nullopt with
// `error` set (the previous checkpoints are untouched either way).
std::optional<ShardEntry> checkpoint_write_shard(const std::string& dir, int64_t step, int rank,
                                                 const KeyValues& meta,
                                                 std::span<const TensorView> tensors,
                                                 std::string* error);

// Rank 0, after a barrier that follows every rank's checkpoint_write_shard: writes manifest.json
// atomically. `shards` as gathered from the ranks; when empty, the entries are read from the shard
// files' headers in the step folder (ranks 0..world-1; needs a shared file system).
bool checkpoint_write_manifest(const std::string& dir, int64_t step, int world,
                               const KeyValues& meta, std::vector<ShardEntry> shards,
                               std::string* error);

// Reads and fully verifies one shard (header, size, checksum, structure).
std::optional<CheckpointShard> checkpoint_read_shard(const std::string& path, std::string* error);

// Verifies one step folder: manifest parses, every listed shard exists with the listed size and
// checksum. Returns the manifest, or nullopt with `why` set.
std::optional<Manifest> checkpoint_verify(const std::string& step_dir, std::string* why);

// Scans `dir` for step-* folders, newest first, returns the first that verifies. Torn or corrupt
// folders (no manifest, missing/short shard, checksum mismatch) are skipped with a warning. If the
// first good one's meta differs from `expected` on any key present in `expected`, `error` names
// each mismatch ("model: checkpoint has 'gpt-small', this run has 'gpt-tiny'"). A missing `dir` is
// a fresh start, not an error.
LatestGood checkpoint_find_latest_good(const std::string& dir, const KeyValues& expected);

// Compares meta with expected on the keys of `expected`; "" when they agree.
std::string checkpoint_check_meta(const KeyValues& meta, const KeyValues& expected);

// Rank 0, after writing a manifest: keeps the newest `keep` good checkpoints (keep >= 1); of the
// older step folders, removes those that verify and moves every other one (torn, corrupt) aside
// into <dir>/unverified/ (never deleted automatically: it may be the only copy of some progress).
// Folders newer than the newest good one are left alone (another run may be writing them).
// Returns the removed folders; `moved_aside` gets the new paths of the moved ones.
std::vector<std::string> checkpoint_retain(const std::string& dir, int keep = 3,
                                           std::vector<std::string>* moved_aside = nullptr);

// Moves a step folder into <dir>/unverified/ (a name that is free there); returns the new path,
// or "" with `error` set.
std::string checkpoint_move_aside(const std::string& step_dir, std::string* error);

}  // namespace capplan::rt
