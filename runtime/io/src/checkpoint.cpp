// Checkpoint shard files, manifests, verification, latest-good search and retention.
//
// Shard file: a 32-byte header, then the payload.
//   [0, 8)   magic "CPLNCKPT"
//   [8, 12)  u32 format version (1)
//   [12, 16) u32 CRC32C of the payload
//   [16, 24) u64 payload bytes
//   [24, 28) u32 CRC32C of bytes [0, 24) (a torn or scribbled header is caught before the payload)
//   [28, 32) zero
// Payload (little-endian): u32 n_meta, n_meta x (u32 len, key, u32 len, value), u32 n_tensors,
// n_tensors x (u32 len, name, u64 count, count x f32).
#include "io/checkpoint.h"

#include "planner/json.h"
#include "planner/limits.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "planner/atomic_file.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace capplan::rt {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'C', 'P', 'L', 'N', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr const char* kManifestName = "manifest.json";

// ---- CRC32C: slicing-by-8 tables (Intel, "A Systematic Approach to Building High Performance
// Software-based CRC Generators", 2005), or the SSE4.2 crc32 instruction when the CPU has it.
struct Crc32cTables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

uint32_t crc32c_soft(const unsigned char* p, size_t n, uint32_t c) {
  static const Crc32cTables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const unsigned char* p, size_t n,
                                                     uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c64);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

void put_u32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string* s, const std::string& v) {
  put_u32(s, uint32_t(v.size()));
  s->append(v);
}

struct FileHeader {
  uint32_t version = 0;
  uint32_t crc = 0;
  uint64_t payload_bytes = 0;
};

std::array<unsigned char, kHeaderBytes> encode_header(uint32_t crc, uint64_t payload_bytes) {
  std::array<unsigned char, kHeaderBytes> h{};
  std::memcpy(h.data(), kMagic, 8);
  std::memcpy(h.data() + 8, &kVersion, 4);
  std::memcpy(h.data() + 12, &crc, 4);
  std::memcpy(h.data() + 16, &payload_bytes, 8);
  uint32_t hc = crc32c(h.data(), 24);
  std::memcpy(h.data() + 24, &hc, 4);
  return h;
}

bool decode_header(const unsigned char* h, size_t n, FileHeader* out, std::string* why) {
  if (n < kHeaderBytes) {
    *why = "shorter than the 32-byte header (" + std::to_string(n) + " bytes)";
    return false;
  }
  if (std::memcmp(h, kMagic, 8) != 0) {
    *why = "not a capplan checkpoint shard (bad magic)";
    return false;
  }
  uint32_t hc;
  std::memcpy(&hc, h + 24, 4);
  if (hc != crc32c(h, 24)) {
    *why = "header checksum mismatch";
    return false;
  }
  std::memcpy(&out->version, h + 8, 4);
  std::memcpy(&out->crc, h + 12, 4);
  std::memcpy(&out->payload_bytes, h + 16, 8);
  if (out->version != kVersion) {
    *why = "unsupported format version " + std::to_string(out->version);
    return false;
  }
  return true;
}

// Reads the header and streams the payload through CRC32C; checks size and checksum.
bool verify_shard_file(const std::string& path, FileHeader* header, uint64_t* file_bytes,
                       std::string* why) {
  if (!check_input_file(path, *why)) return false;  // a FIFO would block the open
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot open: " + errno_text(errno);
    return false;
  }
  std::vector<unsigned char> buf(size_t(4) << 20);
  size_t got = 0;
  while (got < kHeaderBytes) {
    ssize_t n = ::read(fd, buf.data() + got, kHeaderBytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  if (!decode_header(buf.data(), got, header, why)) {
    ::close(fd);
    return false;
  }
  uint64_t total = 0;
  uint32_t c = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = "read failed: " + errno_text(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    c = crc32c(buf.data(), size_t(n), c);
    total += uint64_t(n);
  }
  ::close(fd);
  *file_bytes = total + kHeaderBytes;
  if (total != header->payload_bytes) {
    *why = "payload is " + std::to_string(total) + " bytes, the header says " +
           std::to_string(header->payload_bytes) + (total < header->payload_bytes ? " (truncated)" : "");
    return false;
  }
  if (c != header->crc) {
    *why = "payload checksum mismatch (corrupt)";
    return false;
  }
  return true;
}

bool parse_step_dir_name(const std::string& name, int64_t* step) {
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0) return false;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

// Step folders in `dir`, newest first.
std::vector<std::pair<int64_t, std::string>> list_step_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    int64_t step;
    if (e.is_directory() && parse_step_dir_name(e.path().filename().string(), &step))
      out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

bool read_manifest(const std::string& step_dir, Manifest* m, std::string* why) {
  const std::string path = (fs::path(step_dir) / kManifestName).string();
  std::string text, err;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    *why = "no manifest (torn: the run stopped before every rank had written)";
    return false;
  }
  if (!read_input_file(path, text, err)) {
    *why = "manifest: " + err;
    return false;
  }
  const std::optional<Json> parsed = json_parse(text, &err);
  if (!parsed || !parsed->is_object()) {
    *why = "manifest is not valid JSON (" + (err.empty() ? std::string("not an object") : err) + ")";
    return false;
  }
  const Json& v = *parsed;
  if (json_string(v, "format") != "capplan-checkpoint") {
    *why = "manifest format is not 'capplan-checkpoint'";
    return false;
  }
  m->step = json_int(v, "step", -1, 0);
  m->world = int(json_int(v, "world", 0, 1, 1 << 24));
  m->meta.clear();
  m->shards.clear();
  if (const auto meta = v.find("meta"); meta != v.end() && meta->is_object()) {
    for (const auto& [k, val] : meta->items())
      if (val.is_string()) m->meta[k] = val.get<std::string>();
  }
  const auto shards = v.find("shards");
  if (m->step < 0 || m->world <= 0 || shards == v.end() || !shards->is_array() ||
      int(shards->size()) != m->world) {
    *why = "manifest lacks step, world or one shard entry per rank";
    return false;
  }
  for (const Json& s : *shards) {
    ShardEntry e;
    e.rank = int(json_int(s, "rank", -1, 0, 1 << 24));
    e.file = json_string(s, "file");
    e.bytes = uint64_t(json_int(s, "bytes", 0, 0));
    e.crc32c = uint32_t(json_int(s, "crc32c", 0, 0, UINT32_MAX));
    if (e.rank != int(m->shards.size()) || e.file.empty() ||
        e.file.find('/') != std::string::npos) {
      *why = "manifest shard entry " + std::to_string(m->shards.size()) + " is malformed";
      return false;
    }
    m->shards.push_back(e);
  }
  return true;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  c = hw ? crc32c_hw(p, bytes, c) : crc32c_soft(p, bytes, c);
#else
  c = crc32c_soft(p, bytes, c);
#endif
  return ~c;
}

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc) {
  return ~crc32c_soft(static_cast<const unsigned char*>(data), bytes, ~crc);
}

const Tensor* CheckpointShard::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step-%06lld", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string checkpoint_shard_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.ckpt", rank);
  return name;
}

std::optional<ShardEntry> checkpoint_write_shard(const std::string& dir, int64_t step, int rank,
                                                 const KeyValues& meta,
                                                 std::span<const TensorView> tensors,
                                                 std::string* error) {
  const std::string step_dir = checkpoint_step_dir(dir, step);
  if (!make_dirs(step_dir, error)) return std::nullopt;
  if (rank == 0) {
    std::error_code ec;
    fs::remove(fs::path(step_dir) / kManifestName, ec);  // a stale manifest must not vouch for us
  }
  KeyValues m = meta;
  m["step"] = std::to_string(step);
  m["rank"] = std::to_string(rank);

  AtomicFile f;
  const std::string path = (fs::path(step_dir) / checkpoint_shard_name(rank)).string();
  if (!f.open(path, error)) return std::nullopt;
  std::array<unsigned char, kHeaderBytes> placeholder{};
  if (!f.write(placeholder.data(), placeholder.size(), error)) return std::nullopt;

  uint32_t crc = 0;
  uint64_t payload = 0;
  auto emit = [&](const void* p, size_t n) {
    crc = crc32c(p, n, crc);
    payload += n;
    return f.write(p, n, error);
  };
  std::string head;
  put_u32(&head, uint32_t(m.size()));
  for (const auto& [k, v] : m) {
    put_str(&head, k);
    put_str(&head, v);
  }
  put_u32(&head, uint32_t(tensors.size()));
  if (!emit(head.data(), head.size())) return std::nullopt;
  for (const auto& t : tensors) {
    std::string th;
    put_str(&th, t.name);
    put_u64(&th, uint64_t(t.count));
    if (!emit(th.data(), th.size())) return std::nullopt;
    if (t.count > 0 && !emit(t.data, size_t(t.count) * sizeof(float))) return std::nullopt;
  }
  auto header = encode_header(crc, payload);
  if (!f.pwrite_at(header.data(), header.size(), 0, error)) return std::nullopt;
  if (!f.commit(error)) return std::nullopt;
  ShardEntry e;
  e.rank = rank;
  e.file = checkpoint_shard_name(rank);
  e.bytes = payload + kHeaderBytes;
  e.crc32c = crc;
  return e;
}

bool checkpoint_write_manifest(const std::string& dir, int64_t step, int world,
                               const KeyValues& meta, std::vector<ShardEntry> shards,
                               std::string* error) {
  const std::string step_dir = checkpoint_step_dir(dir, step);
  if (shards.empty()) {
    for (int r = 0; r < world; ++r) {
      const std::string path = (fs::path(step_dir) / checkpoint_shard_name(r)).string();
      std::ifstream in(path, std::ios::binary);
      std::array<unsigned char, kHeaderBytes> h{};
      in.read(reinterpret_cast<char*>(h.data()), std::streamsize(h.size()));
      FileHeader fh;
      std::string why;
      if (!decode_header(h.data(), size_t(in.gcount()), &fh, &why)) {
        *error = path + ": " + why;
        return false;
      }
      shards.push_back({r, checkpoint_shard_name(r), fh.payload_bytes + kHeaderBytes, fh.crc});
    }
  }
  std::sort(shards.begin(), shards.end(),
            [](const ShardEntry& a, const ShardEntry& b) { return a.rank < b.rank; });
  if (int(shards.size()) != world) {
    *error = "manifest for step " + std::to_string(step) + ": " + std::to_string(shards.size()) +
             " shard entries for a world of " + std::to_string(world);
    return false;
  }
  Json entries = Json::array();
  for (const auto& s : shards) {
    entries.push_back({{"rank", s.rank}, {"file", s.file}, {"bytes", s.bytes}, {"crc32c", s.crc32c}});
  }
  Json manifest = {{"format", "capplan-checkpoint"}, {"version", 1}, {"step", step}, {"world", world},
                   {"meta", Json::object()}, {"shards", std::move(entries)}};
  for (const auto& [k, v] : meta) manifest["meta"][k] = v;
  const std::string j = json_dump(manifest) + "\n";
  AtomicFile f;
  // The last fsync makes the new step folder's own entry in `dir` durable.
  return f.open((fs::path(step_dir) / kManifestName).string(), error) &&
         f.write(j.data(), j.size(), error) && f.commit(error) && fsync_dir(dir, error);
}

namespace {

// Reads the payload straight into its destinations (no whole-file buffer: a shard is read with
// one copy and no second allocation of its size), checksumming as it goes.
class PayloadReader {
 public:
  PayloadReader(int fd, uint64_t payload_bytes) : fd_(fd), left_(payload_bytes) {}
  bool read(void* out, uint64_t n) {
    if (n > left_) return false;
    char* p = static_cast<char*>(out);
    uint64_t want = n;
    while (want > 0) {
      ssize_t got = ::read(fd_, p, size_t(std::min<uint64_t>(want, uint64_t(1) << 30)));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      crc_ = crc32c(p, size_t(got), crc_);
      p += got;
      want -= uint64_t(got);
    }
    left_ -= n;
    return true;
  }
  bool read_str(std::string* s) {
    uint32_t n = 0;
    if (!read(&n, 4) || n > left_) return false;
    s->resize(n);
    return read(s->data(), n);
  }
  uint64_t left() const { return left_; }
  uint32_t crc() const { return crc_; }

 private:
  int fd_;
  uint64_t left_;
  uint32_t crc_ = 0;
};

}  // namespace

std::optional<CheckpointShard> checkpoint_read_shard(const std::string& path, std::string* error) {
  if (std::string why; !check_input_file(path, why)) {
    *error = path + ": " + why;
    return std::nullopt;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": cannot open: " + errno_text(errno);
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::array<unsigned char, kHeaderBytes> hb{};
  ssize_t got = ::pread(fd, hb.data(), hb.size(), 0);
  FileHeader h;
  std::string why;
  if (!decode_header(hb.data(), got > 0 ? size_t(got) : 0, &h, &why)) {
    *error = path + ": " + why;
    return std::nullopt;
  }
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec || size - kHeaderBytes != h.payload_bytes) {
    *error = path + ": payload is " + std::to_string(size - kHeaderBytes) +
             " bytes, the header says " + std::to_string(h.payload_bytes) +
             (size - kHeaderBytes < h.payload_bytes ? " (truncated)" : "");
    return std::nullopt;
  }
  ::lseek(fd, off_t(kHeaderBytes), SEEK_SET);
  PayloadReader r(fd, h.payload_bytes);
  CheckpointShard shard;
  bool ok = true;
  uint32_t n_meta = 0;
  ok = r.read(&n_meta, 4);
  for (uint32_t i = 0; ok && i < n_meta; ++i) {
    std::string k, v;
    ok = r.read_str(&k) && r.read_str(&v);
    if (ok) shard.meta[k] = v;
  }
  uint32_t n_tensors = 0;
  ok = ok && r.read(&n_tensors, 4);
  for (uint32_t i = 0; ok && i < n_tensors; ++i) {
    Tensor t;
    uint64_t count = 0;
    ok = r.read_str(&t.name) && r.read(&count, 8) && count <= r.left() / sizeof(float);
    if (!ok) break;
    t.data.resize(size_t(count));
    ok = r.read(t.data.data(), count * sizeof(float));
    shard.tensors.push_back(std::move(t));
  }
  // Check the checksum before trusting the structure's verdict: a flipped bit is "corrupt".
  if (ok && r.left() == 0 && r.crc() != h.crc) {
    *error = path + ": payload checksum mismatch (corrupt)";
    return std::nullopt;
  }
  if (!ok || r.left() != 0) {
    *error = path + ": malformed or corrupt payload at byte " +
             std::to_string(kHeaderBytes + h.payload_bytes - r.left());
    return std::nullopt;
  }
  return shard;
}

std::optional<Manifest> checkpoint_verify(const std::string& step_dir, std::string* why) {
  Manifest m;
  if (!read_manifest(step_dir, &m, why)) return std::nullopt;
  for (const auto& e : m.shards) {
    const std::string path = (fs::path(step_dir) / e.file).string();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) {
      *why = e.file + " is missing";
      return std::nullopt;
    }
    if (size != e.bytes) {
      *why = e.file + " is " + std::to_string(size) + " bytes, the manifest says " +
             std::to_string(e.bytes) + (size < e.bytes ? " (truncated)" : "");
      return std::nullopt;
    }
    FileHeader h;
    uint64_t bytes = 0;
    std::string w;
    if (!verify_shard_file(path, &h, &bytes, &w)) {
      *why = e.file + ": " + w;
      return std::nullopt;
    }
    if (h.crc != e.crc32c) {
      *why = e.file + " checksum differs from the manifest's (a shard from another save)";
      return std::nullopt;
    }
  }
  return m;
}

std::string checkpoint_check_meta(const KeyValues& meta, const KeyValues& expected) {
  std::string out;
  for (const auto& [k, want] : expected) {
    auto it = meta.find(k);
    std::string item;
    if (it == meta.end())
      item = k + ": the checkpoint does not record it, this run has '" + want + "'";
    else if (it->second != want)
      item = k + ": the checkpoint has " + it->second + ", this run has " + want;
    if (!item.empty()) out += (out.empty() ? "" : "; ") + item;
  }
  return out;
}

LatestGood checkpoint_find_latest_good(const std::string& dir, const KeyValues& expected) {
  LatestGood r;
  for (const auto& [step, path] : list_step_dirs(dir)) {
    std::string why;
    auto m = checkpoint_verify(path, &why);
    if (!m) {
      r.warnings.push_back(path + ": skipped: " + why);
      std::error_code ec;
      if (fs::exists(fs::path(path) / kManifestName, ec)) {
        r.failed.push_back(path + ": " + why);
        r.failed_dirs.push_back(path);
      }
      continue;
    }
    std::string mismatch = checkpoint_check_meta(m->meta, expected);
    if (!mismatch.empty())
      r.error = path + ": checkpoint is from a different model or layout: " + mismatch;
    r.manifest = std::move(m);
    r.step_dir = path;
    break;
  }
  return r;
}

std::string checkpoint_move_aside(const std::string& step_dir, std::string* error) {
  const fs::path from(step_dir);
  const fs::path aside = from.parent_path() / "unverified";
  std::error_code ec;
  fs::create_directories(aside, ec);
  if (ec) {
    *error = aside.string() + ": cannot create: " + ec.message();
    return {};
  }
  fs::path to = aside / from.filename();
  for (int i = 1; fs::exists(to, ec) && i < 1000; ++i)
    to = aside / (from.filename().string() + "." + std::to_string(i));
  fs::rename(from, to, ec);
  if (ec) {
    *error = step_dir + ": cannot move into " + aside.string() + ": " + ec.message();
    return {};
  }
  return to.string();
}

std::vector<std::string> checkpoint_retain(const std::string& dir, int keep,
                                           std::vector<std::string>* moved_aside) {
  keep = std::max(keep, 1);
  std::vector<std::string> removed;
  auto dirs = list_step_dirs(dir);
  int good = 0;
  bool seen_good = false;
  for (const auto& [step, path] : dirs) {
    Manifest m;
    std::string why;
    const bool has_manifest = read_manifest(path, &m, &why);
    if (!seen_good) {  // newer than the newest good one, or it: leave alone
      if (has_manifest) {
        seen_good = true;
        ++good;
      }
      continue;
    }
    if (has_manifest && good < keep) {
      ++good;
      continue;
    }
    // Only a folder that verifies is deleted; anything else may be the only copy of progress.
    if (!has_manifest || !checkpoint_verify(path, &why)) {
      std::string error;
      const std::string to = checkpoint_move_aside(path, &error);
      if (!to.empty() && moved_aside) moved_aside->push_back(to);
      continue;
    }
    // Manifest first: a removal cut short leaves a folder that no longer claims to be good.
    std::error_code ec;
    fs::remove(fs::path(path) / kManifestName, ec);
    fs::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

}  // namespace capplan::rt
