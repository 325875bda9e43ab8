// Checkpoint shards and manifests: round trip, CRC32C, torn/corrupt checkpoints skipped for the
// previous good one, layout mismatch errors, retention, and a real SIGKILL during a write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/test_files.h"
#include "io/checkpoint.h"

namespace fs = std::filesystem;
using namespace capplan::rt;

namespace {

fs::path fresh_dir(const std::string& name) { return capplan::test::scratch_dir(name); }

KeyValues layout_meta() { return {{"model", "gpt-tiny"}, {"dp", "2"}, {"zero", "0"}, {"world", "2"}}; }

std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.25f * float(i);
  return v;
}

// A complete checkpoint of `world` ranks at `step`; tensor "w" holds values(n, step + rank).
void save(const fs::path& dir, int64_t step, int world = 2, size_t n = 1000) {
  std::vector<ShardEntry> entries;
  for (int r = 0; r < world; ++r) {
    auto w = values(n, float(step + r));
    auto m = values(n / 2, -1.0f);
    std::vector<TensorView> t = {{"w", w.data(), int64_t(w.size())},
                                 {"adam.m", m.data(), int64_t(m.size())}};
    KeyValues meta = layout_meta();
    meta["data_position"] = std::to_string(step * 8);
    std::string err;
    auto e = checkpoint_write_shard(dir.string(), step, r, meta, t, &err);
    ASSERT_TRUE(e) << err;
    entries.push_back(*e);
  }
  std::string err;
  ASSERT_TRUE(checkpoint_write_manifest(dir.string(), step, world, layout_meta(), entries, &err))
      << err;
}

void flip_byte(const fs::path& p, std::streamoff offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c = char(c ^ 0x10);
  f.seekp(offset);
  f.write(&c, 1);
}

}  // namespace

TEST(Crc32c, KnownAnswer) {
  // Expectation: the CRC-32C check value of "123456789" is 0xE3069283 (RFC 3720, B.4), and
  // chaining two calls equals one call over the concatenation.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of 0
}

TEST(Crc32c, PortableTablesMatchTheDefaultPath) {
  // Expectation: the table-driven fallback gives the check value and agrees with crc32c() (the
  // SSE4.2 instruction where present) on every length 0..300 at every start alignment 0..7.
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> buf(320);
  uint64_t x = 88172645463325252ull;
  for (auto& b : buf) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  for (size_t off = 0; off < 8; ++off)
    for (size_t n = 0; n <= 300; ++n)
      ASSERT_EQ(crc32c_portable(buf.data() + off, n, 7), crc32c(buf.data() + off, n, 7))
          << "offset " << off << " length " << n;
}

TEST(Checkpoint, RoundTrip) {
  auto dir = fresh_dir("roundtrip");
  save(dir, 10);
  std::string why;
  auto m = checkpoint_verify(checkpoint_step_dir(dir.string(), 10), &why);
  ASSERT_TRUE(m) << why;
  EXPECT_EQ(m->step, 10);
  EXPECT_EQ(m->world, 2);
  EXPECT_EQ(m->meta.at("model"), "gpt-tiny");
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(fs::path(checkpoint_step_dir(dir.string(), 10)).filename(), "step-000010");
  std::string err;
  auto s = checkpoint_read_shard(checkpoint_step_dir(dir.string(), 10) + "/rank-00001.ckpt", &err);
  ASSERT_TRUE(s) << err;
  ASSERT_NE(s->find("w"), nullptr);
  EXPECT_EQ(s->find("w")->data, values(1000, 11.0f));  // bit-exact
  EXPECT_EQ(s->find("adam.m")->data, values(500, -1.0f));
  EXPECT_EQ(s->meta.at("step"), "10");
  EXPECT_EQ(s->meta.at("rank"), "1");
  EXPECT_EQ(s->meta.at("data_position"), "80");
  EXPECT_EQ(s->tensors[0].name, "w");  // order as written
}

TEST(Checkpoint, ManifestFromShardHeaders) {
  // Rank 0 can build the manifest from the shard files' own headers (shared file system).
  auto dir = fresh_dir("from_headers");
  std::vector<ShardEntry> entries;
  for (int r = 0; r < 3; ++r) {
    auto w = values(10, float(r));
    std::vector<TensorView> t = {{"w", w.data(), 10}};
    std::string err;
    entries.push_back(*checkpoint_write_shard(dir.string(), 4, r, {}, t, &err));
  }
  std::string err;
  ASSERT_TRUE(checkpoint_write_manifest(dir.string(), 4, 3, {}, {}, &err)) << err;
  auto m = checkpoint_verify(checkpoint_step_dir(dir.string(), 4), &err);
  ASSERT_TRUE(m) << err;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(m->shards[size_t(r)].crc32c, entries[size_t(r)].crc32c);
}

TEST(Checkpoint, NoCheckpointIsAFreshStart) {
  auto r = checkpoint_find_latest_good((fresh_dir("none") / "missing").string(), layout_meta());
  EXPECT_FALSE(r.manifest);
  EXPECT_TRUE(r.error.empty());
}

TEST(Checkpoint, TornCheckpointsAreSkippedForThePreviousGoodOne) {
  // Expectation: step 10 is good; steps 20 (missing manifest), 30 (truncated shard), 40 (flipped
  // byte in a tensor) and 50 (a shard missing) are each skipped with a warning naming why.
  auto dir = fresh_dir("torn");
  for (int64_t s : {10, 20, 30, 40, 50}) save(dir, s);
  const auto d = [&](int64_t s) { return fs::path(checkpoint_step_dir(dir.string(), s)); };
  fs::remove(d(20) / "manifest.json");
  fs::resize_file(d(30) / "rank-00001.ckpt", fs::file_size(d(30) / "rank-00001.ckpt") - 100);
  flip_byte(d(40) / "rank-00000.ckpt", 200);
  fs::remove(d(50) / "rank-00001.ckpt");

  auto r = checkpoint_find_latest_good(dir.string(), layout_meta());
  ASSERT_TRUE(r.manifest);
  EXPECT_EQ(r.manifest->step, 10);
  EXPECT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.warnings.size(), 4u);
  EXPECT_NE(r.warnings[0].find("step-000050"), std::string::npos);
  EXPECT_NE(r.warnings[0].find("missing"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("step-000040"), std::string::npos);
  EXPECT_NE(r.warnings[1].find("checksum"), std::string::npos) << r.warnings[1];
  EXPECT_NE(r.warnings[2].find("step-000030"), std::string::npos);
  EXPECT_NE(r.warnings[2].find("truncated"), std::string::npos) << r.warnings[2];
  EXPECT_NE(r.warnings[3].find("step-000020"), std::string::npos);
  EXPECT_NE(r.warnings[3].find("no manifest"), std::string::npos) << r.warnings[3];
}

TEST(Checkpoint, CorruptManifestAndHeaderAreSkipped) {
  auto dir = fresh_dir("manifest");
  for (int64_t s : {1, 2, 3}) save(dir, s);
  std::ofstream(fs::path(checkpoint_step_dir(dir.string(), 3)) / "manifest.json") << "{\"format\":";
  flip_byte(fs::path(checkpoint_step_dir(dir.string(), 2)) / "rank-00001.ckpt", 5);  // magic
  auto r = checkpoint_find_latest_good(dir.string(), layout_meta());
  ASSERT_TRUE(r.manifest);
  EXPECT_EQ(r.manifest->step, 1);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].find("not valid JSON"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("bad magic"), std::string::npos) << r.warnings[1];
}

TEST(Checkpoint, HostileManifestNumbersAreMalformedNotUndefined) {
  // Numbers no writer produces (negative sizes, 1e300 ranks, fractions, NaN strings) make the
  // manifest malformed: the checkpoint is skipped (and UBSan sees no float-to-int overflow).
  auto dir = fresh_dir("hostile");
  save(dir, 1, 1, 10);
  save(dir, 2, 1, 10);
  const auto manifest = fs::path(checkpoint_step_dir(dir.string(), 2)) / "manifest.json";
  for (const char* shard : {R"({"rank":1e300,"file":"rank-00000.ckpt","bytes":100,"crc32c":1})",
                            R"({"rank":0,"file":"rank-00000.ckpt","bytes":-5,"crc32c":1})",
                            R"({"rank":0.5,"file":"rank-00000.ckpt","bytes":100,"crc32c":1})",
                            R"({"rank":"NaN","file":"rank-00000.ckpt","bytes":100,"crc32c":1})"}) {
    std::ofstream(manifest) << R"({"format":"capplan-checkpoint","version":1,"step":2,"world":1,)"
                            << R"("meta":{},"shards":[)" << shard << "]}";
    auto r = checkpoint_find_latest_good(dir.string(), {});
    ASSERT_TRUE(r.manifest) << shard;
    EXPECT_EQ(r.manifest->step, 1) << shard;
    ASSERT_EQ(r.warnings.size(), 1u) << shard;
  }
  std::ofstream(manifest) << R"({"format":"capplan-checkpoint","step":1e300,"world":1,"shards":[]})";
  EXPECT_EQ(checkpoint_find_latest_good(dir.string(), {}).manifest->step, 1);
}

TEST(Checkpoint, ReadShardRejectsCorruption) {
  auto dir = fresh_dir("read_corrupt");
  save(dir, 5);
  const auto p = fs::path(checkpoint_step_dir(dir.string(), 5)) / "rank-00000.ckpt";
  flip_byte(p, 1000);
  std::string err;
  EXPECT_FALSE(checkpoint_read_shard(p.string(), &err));
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  EXPECT_NE(err.find("rank-00000.ckpt"), std::string::npos) << err;
}

TEST(Checkpoint, DifferentModelOrLayoutIsAnErrorNamingTheMismatch) {
  auto dir = fresh_dir("mismatch");
  save(dir, 10);
  KeyValues expected = layout_meta();
  expected["model"] = "gpt-small";
  expected["dp"] = "4";
  auto r = checkpoint_find_latest_good(dir.string(), expected);
  ASSERT_FALSE(r.error.empty());
  EXPECT_NE(r.error.find("model: the checkpoint has gpt-tiny, this run has gpt-small"),
            std::string::npos) << r.error;
  EXPECT_NE(r.error.find("dp: the checkpoint has 2, this run has 4"), std::string::npos)
      << r.error;
  EXPECT_EQ(r.error.find("zero"), std::string::npos) << r.error;  // agreeing keys not listed
}

TEST(Checkpoint, RetentionKeepsTheLastK) {
  // Expectation: good 1..5 plus a torn 3.5-like folder (step 4 torn) and a newer in-progress
  // step 9 (no manifest): keep 3 good = 5, 3, 2, remove 1 (it verifies), move 4 aside into
  // unverified/ (torn: never deleted automatically), never touch 9.
  auto dir = fresh_dir("retain");
  for (int64_t s : {1, 2, 3, 4, 5, 9}) save(dir, s, 1, 10);
  fs::remove(fs::path(checkpoint_step_dir(dir.string(), 4)) / "manifest.json");
  fs::remove(fs::path(checkpoint_step_dir(dir.string(), 9)) / "manifest.json");
  std::vector<std::string> aside;
  auto removed = checkpoint_retain(dir.string(), 3, &aside);
  EXPECT_EQ(removed, std::vector<std::string>{checkpoint_step_dir(dir.string(), 1)});
  EXPECT_EQ(aside, std::vector<std::string>{(dir / "unverified" / "step-000004").string()});
  EXPECT_TRUE(fs::exists(dir / "unverified" / "step-000004" / "rank-00000.ckpt"));
  for (int64_t s : {2, 3, 5, 9}) EXPECT_TRUE(fs::exists(checkpoint_step_dir(dir.string(), s))) << s;
  for (int64_t s : {1, 4}) EXPECT_FALSE(fs::exists(checkpoint_step_dir(dir.string(), s))) << s;
}

TEST(Checkpoint, RetentionNeverDeletesACorruptCheckpoint) {
  // Expectation: steps 1..4 saved, step 1's shard then corrupted (one byte flipped); a save of
  // step 5 keeping 3 removes step 2 (it verifies) and moves step 1 aside (it no longer
  // verifies) instead of deleting it, and
  // latest-good lists a corrupt folder (it has a manifest) as failed, a torn one not.
  auto dir = fresh_dir("retain_corrupt");
  for (int64_t s : {1, 2, 3, 4, 5}) save(dir, s, 1, 10);
  const fs::path shard = fs::path(checkpoint_step_dir(dir.string(), 1)) / "rank-00000.ckpt";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  std::vector<std::string> aside;
  const auto removed = checkpoint_retain(dir.string(), 3, &aside);
  EXPECT_EQ(removed, std::vector<std::string>{checkpoint_step_dir(dir.string(), 2)});
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_TRUE(fs::exists(fs::path(aside[0]) / "rank-00000.ckpt"));
  // All of them corrupt or torn: nothing good, the corrupt ones listed as failed.
  for (int64_t s : {3, 4}) fs::remove(fs::path(checkpoint_step_dir(dir.string(), s)) / "rank-00000.ckpt");
  fs::remove(fs::path(checkpoint_step_dir(dir.string(), 5)) / "manifest.json");
  const LatestGood lg = checkpoint_find_latest_good(dir.string(), {});
  EXPECT_FALSE(lg.manifest.has_value());
  EXPECT_EQ(lg.warnings.size(), 3u);
  ASSERT_EQ(lg.failed.size(), 2u);
  EXPECT_NE(lg.failed[0].find("step-000004: rank-00000.ckpt is missing"), std::string::npos) << lg.failed[0];
}

TEST(Checkpoint, RewritingAStepInvalidatesItsOldManifest) {
  // Resuming from step 10 and saving step 20 again: once rank 0 starts the new save, the old
  // manifest no longer vouches for a half-rewritten folder.
  auto dir = fresh_dir("rewrite");
  save(dir, 10);
  save(dir, 20);
  auto w = values(1000, 99.0f);
  std::vector<TensorView> t = {{"w", w.data(), 1000}};
  std::string err;
  ASSERT_TRUE(checkpoint_write_shard(dir.string(), 20, 0, layout_meta(), t, &err));
  auto r = checkpoint_find_latest_good(dir.string(), layout_meta());
  ASSERT_TRUE(r.manifest);
  EXPECT_EQ(r.manifest->step, 10);
}

TEST(Checkpoint, SigkillDuringWriteLeavesLastGoodIntact) {
  // A child process writes big checkpoints in a loop (steps 100, 101, ...); the parent SIGKILLs
  // it mid-write. Expectation: the good step-10 checkpoint written before still verifies, and
  // find_latest_good returns a checkpoint that verifies (10, or a later one the child completed).
  auto dir = fresh_dir("sigkill");
  save(dir, 10);
  std::string why;
  ASSERT_TRUE(checkpoint_verify(checkpoint_step_dir(dir.string(), 10), &why)) << why;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipefd[0]);
    std::vector<float> big(size_t(8) << 20, 1.5f);  // 32 MiB per shard
    std::vector<TensorView> t = {{"w", big.data(), int64_t(big.size())}};
    for (int64_t step = 100;; ++step) {
      std::string err;
      for (int r = 0; r < 2; ++r) {
        if (step == 100 && r == 1) {
          char c = 'x';
          (void)!::write(pipefd[1], &c, 1);  // the parent kills us while rank 1 writes
        }
        checkpoint_write_shard(dir.string(), step, r, layout_meta(), t, &err);
      }
      checkpoint_write_manifest(dir.string(), step, 2, layout_meta(), {}, &err);
    }
  }
  ::close(pipefd[1]);
  char c;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  ::usleep(20 * 1000);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pipefd[0]);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(checkpoint_verify(checkpoint_step_dir(dir.string(), 10), &why)) << why;
  auto r = checkpoint_find_latest_good(dir.string(), layout_meta());
  ASSERT_TRUE(r.manifest);
  EXPECT_TRUE(checkpoint_verify(r.step_dir, &why)) << why;
  if (r.manifest->step == 10) {
    EXPECT_FALSE(r.warnings.empty());  // the torn step-000100 was seen and skipped
  }
}
