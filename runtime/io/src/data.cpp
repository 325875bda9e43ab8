// Token shards (llm.c .bin layout), the shard writer, the seeded global sample order, the file and
// synthetic DataSources, and `capplan-train data prepare`.
#include "io/data.h"

#include "planner/flags.h"
#include "planner/limits.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "planner/atomic_file.h"

namespace capplan::rt {
namespace fs = std::filesystem;

namespace {

std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string s = v < 0 ? "-" : "";
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % 3 == 0) s.push_back(',');
    s.push_back(digits[k]);
  }
  return s;
}

void shard_error(Diagnostics* diags, const std::string& path, int64_t offset,
                 const std::string& message, const std::string& hint = {}) {
  std::string m = offset >= 0 ? "byte offset " + std::to_string(offset) + ": " + message : message;
  diags->error(path, 0, 0, "", m, hint);
}

bool read_exact(int fd, void* buf, size_t bytes, off_t offset) {
  char* p = static_cast<char*>(buf);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
    offset += n;
  }
  return true;
}

// An open, validated, read-only mapped shard.
struct MappedShard {
  std::string path;
  const uint16_t* tokens = nullptr;
  int64_t num_tokens = 0;
  void* map = nullptr;
  size_t map_bytes = 0;
  ~MappedShard() {
    if (map) ::munmap(map, map_bytes);
  }
};

bool header_from_fd(int fd, const std::string& path, ShardHeader* header, Diagnostics* diags) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    shard_error(diags, path, -1, "cannot stat: " + errno_text(errno));
    return false;
  }
  const int64_t size = st.st_size;
  if (size < kShardHeaderBytes) {
    shard_error(diags, path, size,
                "truncated: file has " + std::to_string(size) + " bytes, the header alone needs " +
                    std::to_string(kShardHeaderBytes));
    return false;
  }
  std::array<int32_t, kShardHeaderInts> h{};
  if (!read_exact(fd, h.data(), sizeof(h), 0)) {
    shard_error(diags, path, 0, "cannot read the header: " + errno_text(errno));
    return false;
  }
  header->magic = h[0];
  header->version = h[1];
  header->num_tokens = h[2];
  if (h[0] != kShardMagic) {
    shard_error(diags, path, 0,
                "bad magic " + std::to_string(h[0]) + ", expected " + std::to_string(kShardMagic),
                "not an llm.c token shard (.bin); create shards with `capplan-train data prepare`");
    return false;
  }
  if (h[1] != kShardVersion) {
    shard_error(diags, path, 4,
                "unsupported version " + std::to_string(h[1]) + ", expected " +
                    std::to_string(kShardVersion) + " (uint16 tokens)");
    return false;
  }
  if (h[2] < 0) {
    shard_error(diags, path, 8, "negative token count " + std::to_string(h[2]));
    return false;
  }
  const int64_t expected = kShardHeaderBytes + 2 * int64_t(h[2]);
  if (size < expected) {
    shard_error(diags, path, size,
                "truncated: header says " + std::to_string(h[2]) + " tokens (" +
                    std::to_string(expected) + " bytes) but the file has " + std::to_string(size) +
                    " bytes");
    return false;
  }
  if (size > expected) {
    shard_error(diags, path, expected,
                "file has " + std::to_string(size - expected) +
                    " bytes after the last of the header's " + std::to_string(h[2]) + " tokens");
    return false;
  }
  return true;
}

bool check_tokens(const std::string& path, const uint16_t* tokens, int64_t n, int vocab,
                  Diagnostics* diags) {
  if (vocab <= 0 || vocab > 65535) return true;
  const uint16_t limit = uint16_t(vocab);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] >= limit) {
      shard_error(diags, path, kShardHeaderBytes + 2 * i,
                  "token " + std::to_string(tokens[i]) + " >= vocab " + std::to_string(vocab) +
                      " (token index " + std::to_string(i) + ")",
                  "the shard was tokenised for a larger vocabulary than the model's");
      return false;
    }
  }
  return true;
}

class FileDataSource final : public DataSource {
 public:
  FileDataSource(const DataConfig& c, std::vector<std::unique_ptr<MappedShard>> shards)
      : shards_(std::move(shards)) {
    seq_len_ = c.seq_len;
    vocab_ = c.vocab;
    seed_ = c.seed;
    first_window_.push_back(0);
    for (const auto& s : shards_) {
      total_tokens_ += s->num_tokens;
      first_window_.push_back(first_window_.back() + windows_in(s->num_tokens));
    }
    num_windows_ = first_window_.back();
  }

  int64_t windows_in(int64_t n) const { return n > 0 ? (n - 1) / seq_len_ : 0; }

  void sample(int64_t global_index, int32_t* out) override {
    const int64_t w = window_of(global_index);
    // Shard s holds windows [first_window_[s], first_window_[s + 1]).
    auto it = std::upper_bound(first_window_.begin(), first_window_.end(), w);
    const size_t s = size_t(it - first_window_.begin()) - 1;
    const uint16_t* t = shards_[s]->tokens + (w - first_window_[s]) * seq_len_;
    for (int i = 0; i <= seq_len_; ++i) out[i] = t[i];
  }

  std::string describe() const override {
    return std::to_string(shards_.size()) + " shard" + (shards_.size() == 1 ? "" : "s") + ", " +
           with_commas(total_tokens_) + " tokens, " + with_commas(num_windows_) + " windows of " +
           std::to_string(seq_len_ + 1) + " tokens";
  }

 private:
  std::vector<std::unique_ptr<MappedShard>> shards_;
  std::vector<int64_t> first_window_;
  int64_t total_tokens_ = 0;
};

class SyntheticDataSource final : public DataSource {
 public:
  explicit SyntheticDataSource(const DataConfig& c) {
    seq_len_ = c.seq_len;
    vocab_ = c.vocab;
    seed_ = c.seed;
    num_windows_ = c.synthetic_windows;
  }

  void sample(int64_t global_index, int32_t* out) override {
    const int64_t w = window_of(global_index);
    const uint64_t base = uint64_t(w) * uint64_t(seq_len_ + 1);
    for (int p = 0; p <= seq_len_; ++p) {
      uint64_t state = seed_ ^ ((base + uint64_t(p)) * 0xD1B54A32D192ED03ull);
      out[p] = int32_t(splitmix64(&state) % uint64_t(vocab_));
    }
  }

  std::string describe() const override {
    return "synthetic: " + with_commas(num_windows_) + " windows of " +
           std::to_string(seq_len_ + 1) + " random tokens in [0, " + std::to_string(vocab_) +
           ")";
  }
};

}  // namespace

// ---- shard files ----

bool shard_read_header(const std::string& path, ShardHeader* header, Diagnostics* diags) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    shard_error(diags, path, -1, "cannot open: " + errno_text(errno));
    return false;
  }
  bool ok = header_from_fd(fd, path, header, diags);
  ::close(fd);
  return ok;
}

bool shard_read(const std::string& path, int vocab, std::vector<uint16_t>* tokens,
                Diagnostics* diags) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    shard_error(diags, path, -1, "cannot open: " + errno_text(errno));
    return false;
  }
  ShardHeader h;
  bool ok = header_from_fd(fd, path, &h, diags);
  if (ok) {
    tokens->resize(size_t(h.num_tokens));
    ok = read_exact(fd, tokens->data(), size_t(h.num_tokens) * 2, kShardHeaderBytes);
    if (!ok) shard_error(diags, path, kShardHeaderBytes, "cannot read tokens: " + errno_text(errno));
  }
  ::close(fd);
  return ok && check_tokens(path, tokens->data(), int64_t(tokens->size()), vocab, diags);
}

bool shard_write(const std::string& path, std::span<const uint16_t> tokens, Diagnostics* diags) {
  if (tokens.size() > size_t(INT32_MAX)) {
    shard_error(diags, path, -1, "too many tokens for one shard: " + std::to_string(tokens.size()));
    return false;
  }
  std::array<int32_t, kShardHeaderInts> h{};
  h[0] = kShardMagic;
  h[1] = kShardVersion;
  h[2] = int32_t(tokens.size());
  AtomicFile f;
  std::string err;
  if (!f.open(path, &err) || !f.write(h.data(), sizeof(h), &err) ||
      !f.write(tokens.data(), tokens.size_bytes(), &err) || !f.commit(&err)) {
    diags->error(path, 0, 0, "", err);
    return false;
  }
  return true;
}

std::string shard_path(const std::string& dir, int index) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard_%06d.bin", index);
  return (fs::path(dir) / name).string();
}

bool dataset_list_shards(const std::string& dir, std::vector<std::string>* paths,
                         Diagnostics* diags) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    diags->error(dir, 0, 0, "", fs::exists(dir, ec) ? "not a folder" : "data folder not found",
                 "pass a folder of .bin shards, or --data synthetic");
    return false;
  }
  paths->clear();
  std::vector<std::string> bad;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".bin") continue;
    // A shard that is a dangling symlink, a folder or a FIFO is refused by name, not skipped:
    // skipping it would silently train on less data (and a FIFO would block the reader).
    std::string why;
    if (check_input_file(e.path().string(), why)) paths->push_back(e.path().string());
    else bad.push_back(e.path().string() + ": " + why);
  }
  std::sort(paths->begin(), paths->end());
  std::sort(bad.begin(), bad.end());
  for (const std::string& b : bad)
    diags->error(b.substr(0, b.find(": ")), 0, 0, "",
                 "token shard is " + b.substr(b.find(": ") + 2) + "; a shard must be a regular file");
  if (!bad.empty()) return false;
  if (paths->empty()) {
    diags->error(dir, 0, 0, "", "no .bin token shards in the data folder",
                 "create them with `capplan-train data prepare --text FILE --out " + dir + "`");
    return false;
  }
  return true;
}

ShardWriter::ShardWriter(std::string dir, int64_t shard_bytes) : dir_(std::move(dir)) {
  tokens_per_shard_ = std::clamp<int64_t>((shard_bytes - kShardHeaderBytes) / 2, 1, INT32_MAX);
}

bool ShardWriter::add(std::span<const uint16_t> tokens, Diagnostics* diags) {
  while (!tokens.empty()) {
    const size_t room = size_t(tokens_per_shard_) - buffer_.size();
    const size_t n = std::min(room, tokens.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + ptrdiff_t(n));
    tokens = tokens.subspan(n);
    if (int64_t(buffer_.size()) == tokens_per_shard_ && !flush(diags)) return false;
  }
  return true;
}

bool ShardWriter::finish(Diagnostics* diags) { return buffer_.empty() || flush(diags); }

bool ShardWriter::flush(Diagnostics* diags) {
  std::string err;
  if (shards_written_ == 0 && !make_dirs(dir_, &err)) {
    diags->error(dir_, 0, 0, "", err);
    return false;
  }
  if (!shard_write(shard_path(dir_, shards_written_), buffer_, diags)) return false;
  ++shards_written_;
  tokens_written_ += int64_t(buffer_.size());
  buffer_.clear();
  return true;
}

// ---- sample order ----

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
  uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * uint64_t(epoch + 1));
  for (int64_t i = n - 1; i > 0; --i) {
    // Uniform j in [0, i]: reject draws below 2^64 mod bound (OpenBSD arc4random_uniform).
    const uint64_t bound = uint64_t(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do r = splitmix64(&state);
    while (r < threshold);
    std::swap(perm[size_t(i)], perm[size_t(r % bound)]);
  }
  return perm;
}

int64_t global_sample_index(int64_t step, int64_t gbs, int dp, int dp_rank, int64_t i) {
  return step * gbs + int64_t(dp_rank) * (gbs / dp) + i;
}

int64_t DataSource::window_of(int64_t global_index) {
  const int64_t epoch = global_index / num_windows_;
  if (epoch != cached_epoch_) {
    perm_ = epoch_permutation(num_windows_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return perm_[size_t(global_index % num_windows_)];
}

std::unique_ptr<DataSource> data_open(const DataConfig& c, Diagnostics* diags) {
  bool bad = false;
  if (c.seq_len <= 0) {
    diags->error("<command line>", 0, 0, "seq_len", "must be > 0, found " + std::to_string(c.seq_len));
    bad = true;
  }
  if (c.vocab <= 0) {  // any larger vocab reads uint16 shards (every token is < 65536 <= vocab)
    diags->error("<command line>", 0, 0, "vocab", "must be > 0, found " + std::to_string(c.vocab));
    bad = true;
  }
  if (c.source == "synthetic") {
    if (c.synthetic_windows <= 0) {
      diags->error("<command line>", 0, 0, "synthetic_windows", "must be > 0");
      bad = true;
    }
    if (bad) return nullptr;
    return std::make_unique<SyntheticDataSource>(c);
  }
  std::vector<std::string> paths;
  if (!dataset_list_shards(c.source, &paths, diags) || bad) return nullptr;
  std::vector<std::unique_ptr<MappedShard>> shards;
  int64_t windows = 0;
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      shard_error(diags, p, -1, "cannot open: " + errno_text(errno));
      bad = true;
      continue;
    }
    ShardHeader h;
    if (!header_from_fd(fd, p, &h, diags)) {
      ::close(fd);
      bad = true;
      continue;
    }
    auto s = std::make_unique<MappedShard>();
    s->path = p;
    s->num_tokens = h.num_tokens;
    s->map_bytes = size_t(kShardHeaderBytes + 2 * h.num_tokens);
    void* m = ::mmap(nullptr, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) {
      shard_error(diags, p, -1, "cannot map: " + errno_text(errno));
      bad = true;
      continue;
    }
    s->map = m;
    s->tokens = reinterpret_cast<const uint16_t*>(static_cast<const char*>(m) + kShardHeaderBytes);
    if (c.check_tokens && !check_tokens(p, s->tokens, s->num_tokens, c.vocab, diags)) bad = true;
    windows += h.num_tokens > 0 ? (h.num_tokens - 1) / std::max(c.seq_len, 1) : 0;
    shards.push_back(std::move(s));
  }
  if (bad) return nullptr;
  if (windows == 0) {
    diags->error(c.source, 0, 0, "",
                 "no shard holds a full sample of seq_len + 1 = " + std::to_string(c.seq_len + 1) +
                     " tokens",
                 "add more text or use a shorter sequence");
    return nullptr;
  }
  return std::make_unique<FileDataSource>(c, std::move(shards));
}

// ---- capplan-train data prepare ----

int data_prepare_main(int argc, char** argv) {
  Diagnostics diags;
  std::vector<std::string> texts;
  std::string out;
  int64_t shard_bytes = kDefaultShardBytes;
  const char* usage =
      "usage: capplan-train data prepare --text FILE... --out DIR [--shard-bytes N]\n"
      "  Byte-level tokenizer (vocab 256): writes llm.c-compatible .bin shards of at most N bytes\n"
      "  (default 1073741824) to DIR as shard_000000.bin, shard_000001.bin, ...\n";
  // --text takes one file; the files after it are the positional arguments.
  static const std::vector<FlagSpec> flags = {
      {"text", true, "text files to tokenize", "FILE..."},
      {"out", true, "folder for the shards", "DIR"},
      {"shard-bytes", true, "largest shard, in bytes", "N"},
  };
  const Args args = parse_args(argc, argv, flags, diags, size_t(argc));
  if (args.help()) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (args.has("text")) texts.push_back(args.get("text"));
  texts.insert(texts.end(), args.positional().begin(), args.positional().end());
  out = args.get("out");
  if (const auto n = int_flag(args, "shard-bytes", diags, kShardHeaderBytes + 2, int64_t(1) << 50)) shard_bytes = *n;
  if (texts.empty()) diags.error("<command line>", 0, 0, "--text", "no input text file given");
  if (out.empty()) diags.error("<command line>", 0, 0, "--out", "no output folder given");
  for (const auto& t : texts) {
    std::error_code ec;
    if (!fs::is_regular_file(t, ec)) diags.error(t, 0, 0, "", "text file not found or not a file");
  }
  if (diags.has_errors()) {
    std::fputs(diags.to_string().c_str(), stderr);
    std::fputs(usage, stderr);
    return 2;
  }

  ShardWriter writer(out, shard_bytes);
  std::vector<char> buf(size_t(16) << 20);
  std::vector<uint16_t> tokens;
  for (const auto& t : texts) {
    std::ifstream in(t, std::ios::binary);
    if (!in) {
      diags.error(t, 0, 0, "", "cannot open: " + errno_text(errno));
      break;
    }
    while (in) {
      in.read(buf.data(), std::streamsize(buf.size()));
      const size_t n = size_t(in.gcount());
      if (n == 0) break;
      tokens.resize(n);
      for (size_t k = 0; k < n; ++k) tokens[k] = static_cast<unsigned char>(buf[k]);
      if (!writer.add(tokens, &diags)) break;
    }
    if (in.bad()) diags.error(t, 0, 0, "", "read failed: " + errno_text(errno));
    if (diags.has_errors()) break;
  }
  if (!diags.has_errors()) writer.finish(&diags);
  if (diags.has_errors()) {
    std::fputs(diags.to_string().c_str(), stderr);
    return 1;
  }
  if (writer.tokens_written() == 0) {
    std::fprintf(stderr, "capplan-train data prepare: the input text is empty; nothing written\n");
    return 2;
  }
  // Shards left over from an earlier, larger prepare into the same folder would join the dataset.
  for (int k = writer.shards_written();; ++k) {
    std::error_code ec;
    if (!fs::remove(shard_path(out, k), ec)) break;
  }
  std::printf("wrote %d shard%s, %s tokens (vocab 256) to %s\n", writer.shards_written(),
              writer.shards_written() == 1 ? "" : "s", with_commas(writer.tokens_written()).c_str(),
              out.c_str());
  return 0;
}

}  // namespace capplan::rt
