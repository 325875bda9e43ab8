// Token shards (llm.c layout), shard validation errors, ShardWriter, the global sample order,
// DataSource slices per DP rank, and `data prepare`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "support/test_files.h"
#include "io/data.h"

namespace fs = std::filesystem;
using namespace capplan;
using namespace capplan::rt;

namespace {

fs::path fresh_dir(const std::string& name) { return capplan::test::scratch_dir(name); }

// Writes a shard by hand, byte for byte as llm.c's write_datafile does (header then uint16).
void write_raw(const fs::path& p, int32_t magic, int32_t version, int32_t count,
               const std::vector<uint16_t>& tokens) {
  std::array<int32_t, 256> h{};
  h[0] = magic;
  h[1] = version;
  h[2] = count;
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(h.data()), sizeof(h));
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

std::vector<uint16_t> iota_tokens(size_t n, int mod) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(i % size_t(mod));
  return t;
}

}  // namespace

TEST(ShardFile, RoundTripAndLlmcHeader) {
  // Expectation: the file is 1024 + 2 * n bytes; header ints are 20240520, 1, n; tokens follow.
  auto dir = fresh_dir("roundtrip");
  auto tokens = iota_tokens(1000, 50257);
  Diagnostics d;
  ASSERT_TRUE(shard_write((dir / "a.bin").string(), tokens, &d)) << d.to_string();
  EXPECT_EQ(fs::file_size(dir / "a.bin"), 1024u + 2000u);
  std::ifstream in(dir / "a.bin", std::ios::binary);
  std::array<int32_t, 256> h{};
  in.read(reinterpret_cast<char*>(h.data()), sizeof(h));
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 1000);
  EXPECT_EQ(h[3], 0);
  std::vector<uint16_t> back;
  ASSERT_TRUE(shard_read((dir / "a.bin").string(), 50257, &back, &d)) << d.to_string();
  EXPECT_EQ(back, tokens);
  // No temp file left behind.
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "a.bin");
}

TEST(ShardFile, ReadsAShardWrittenTheLlmcWay) {
  auto dir = fresh_dir("llmc");
  std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 1};
  write_raw(dir / "tiny_val.bin", 20240520, 1, int32_t(tokens.size()), tokens);
  std::vector<uint16_t> back;
  Diagnostics d;
  ASSERT_TRUE(shard_read((dir / "tiny_val.bin").string(), 50257, &back, &d)) << d.to_string();
  EXPECT_EQ(back, tokens);
}

TEST(ShardFile, BadMagicNamesFileAndOffset) {
  auto dir = fresh_dir("badmagic");
  write_raw(dir / "x.bin", 12345, 1, 4, {1, 2, 3, 4});
  ShardHeader h;
  Diagnostics d;
  EXPECT_FALSE(shard_read_header((dir / "x.bin").string(), &h, &d));
  const std::string msg = d.to_string();
  EXPECT_NE(msg.find((dir / "x.bin").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic 12345"), std::string::npos) << msg;
}

TEST(ShardFile, TruncatedFileIsAnError) {
  auto dir = fresh_dir("trunc");
  write_raw(dir / "t.bin", 20240520, 1, 100, iota_tokens(60, 256));  // header says 100, has 60
  std::vector<uint16_t> back;
  Diagnostics d;
  EXPECT_FALSE(shard_read((dir / "t.bin").string(), 256, &back, &d));
  const std::string msg = d.to_string();
  EXPECT_NE(msg.find("t.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 1144"), std::string::npos) << msg;  // 1024 + 2 * 60
  // A file shorter than the header.
  std::ofstream(dir / "short.bin") << "abc";
  Diagnostics d2;
  ShardHeader h;
  EXPECT_FALSE(shard_read_header((dir / "short.bin").string(), &h, &d2));
  EXPECT_NE(d2.to_string().find("truncated"), std::string::npos) << d2.to_string();
}

TEST(ShardFile, TokenOutOfVocabNamesOffset) {
  auto dir = fresh_dir("vocab");
  auto tokens = iota_tokens(10, 100);
  tokens[3] = 300;  // at byte 1024 + 2 * 3 = 1030
  write_raw(dir / "v.bin", 20240520, 1, 10, tokens);
  std::vector<uint16_t> back;
  Diagnostics d;
  EXPECT_FALSE(shard_read((dir / "v.bin").string(), 256, &back, &d));
  const std::string msg = d.to_string();
  EXPECT_NE(msg.find("v.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 1030"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 300 >= vocab 256"), std::string::npos) << msg;
}

// One file per mistake under tests/data/bad/: each error names the file, the byte offset and why.
struct BadShardCase {
  const char* file;
  const char* offset;  // "byte offset N"
  const char* reason;
};

void PrintTo(const BadShardCase& c, std::ostream* os) { *os << c.file; }

class BadShard : public testing::TestWithParam<BadShardCase> {};

TEST_P(BadShard, ErrorNamesFileOffsetAndReason) {
  const auto& c = GetParam();
  const std::string path = std::string(CAPPLAN_SOURCE_DIR) + "/tests/data/bad/" + c.file;
  std::vector<uint16_t> tokens;
  Diagnostics d;
  EXPECT_FALSE(shard_read(path, 256, &tokens, &d));
  ASSERT_EQ(d.items().size(), 1u) << d.to_string();
  const std::string msg = d.items()[0].to_string();
  EXPECT_NE(msg.find(path + ": error: "), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.offset), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.reason), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Files, BadShard,
    testing::Values(
        BadShardCase{"shard_bad_magic.bin", "byte offset 0:", "bad magic 20240519, expected 20240520"},
        BadShardCase{"shard_bad_version.bin", "byte offset 4:", "unsupported version 2"},
        BadShardCase{"shard_truncated.bin", "byte offset 1032:", "truncated: header says 8 tokens"},
        BadShardCase{"shard_trailing_bytes.bin", "byte offset 1032:", "2 bytes after the last"},
        BadShardCase{"shard_token_out_of_vocab.bin", "byte offset 1028:", "token 300 >= vocab 256"},
        BadShardCase{"shard_short_header.bin", "byte offset 12:", "the header alone needs 1024"}),
    [](const testing::TestParamInfo<BadShardCase>& i) {
      std::string n = i.param.file;
      return n.substr(0, n.find('.'));
    });

TEST(ShardWriter, SplitsBySize) {
  // Expectation: shard_bytes = 1024 + 2 * 100 -> 100 tokens per shard; 250 tokens -> 3 shards of
  // 100, 100, 50, concatenating back to the input.
  auto dir = fresh_dir("split");
  ShardWriter w(dir.string(), 1024 + 200);
  auto tokens = iota_tokens(250, 256);
  Diagnostics d;
  ASSERT_TRUE(w.add(std::span(tokens).first(70), &d));
  ASSERT_TRUE(w.add(std::span(tokens).subspan(70), &d));
  ASSERT_TRUE(w.finish(&d)) << d.to_string();
  EXPECT_EQ(w.shards_written(), 3);
  std::vector<std::string> paths;
  ASSERT_TRUE(dataset_list_shards(dir.string(), &paths, &d));
  ASSERT_EQ(paths.size(), 3u);
  std::vector<uint16_t> all, part;
  for (const auto& p : paths) {
    ASSERT_TRUE(shard_read(p, 256, &part, &d));
    all.insert(all.end(), part.begin(), part.end());
  }
  EXPECT_EQ(all, tokens);
  EXPECT_EQ(fs::file_size(paths[2]), 1024u + 100u);
}

TEST(SampleOrder, Splitmix64ReferenceValues) {
  // Expectation: Vigna's splitmix64.c seeded with 1234567 yields 6457827717110365317 first.
  uint64_t s = 1234567;
  EXPECT_EQ(splitmix64(&s), 6457827717110365317ull);
  EXPECT_EQ(splitmix64(&s), 3203168211198807973ull);
}

TEST(SampleOrder, PermutationIsDeterministicAndDiffersByEpoch) {
  auto p0 = epoch_permutation(1000, 42, 0);
  auto p0b = epoch_permutation(1000, 42, 0);
  auto p1 = epoch_permutation(1000, 42, 1);
  auto q0 = epoch_permutation(1000, 43, 0);
  EXPECT_EQ(p0, p0b);
  EXPECT_NE(p0, p1);
  EXPECT_NE(p0, q0);
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> id(1000);
  std::iota(id.begin(), id.end(), 0);
  EXPECT_EQ(sorted, id);  // a permutation
}

TEST(DataSource, OpensFolderAndServesWindows) {
  // Two shards of 101 and 51 tokens, seq_len 10: (101-1)/10 + (51-1)/10 = 10 + 5 = 15 windows.
  auto dir = fresh_dir("source");
  Diagnostics d;
  std::vector<uint16_t> a(101), b(51);
  for (int i = 0; i < 101; ++i) a[size_t(i)] = uint16_t(i);
  for (int i = 0; i < 51; ++i) b[size_t(i)] = uint16_t(1000 + i);
  ASSERT_TRUE(shard_write(shard_path(dir.string(), 0), a, &d));
  ASSERT_TRUE(shard_write(shard_path(dir.string(), 1), b, &d));
  DataConfig c;
  c.source = dir.string();
  c.seq_len = 10;
  c.vocab = 2000;
  c.seed = 7;
  auto src = data_open(c, &d);
  ASSERT_TRUE(src) << d.to_string();
  EXPECT_EQ(src->num_windows(), 15);
  EXPECT_EQ(src->describe(), "2 shards, 152 tokens, 15 windows of 11 tokens");
  // Every window of epoch 0 appears exactly once in samples 0..14, each is 11 consecutive tokens
  // starting at a multiple of 10 within one shard.
  std::set<int32_t> starts;
  std::vector<int32_t> s(11);
  for (int64_t g = 0; g < 15; ++g) {
    src->sample(g, s.data());
    for (int i = 1; i <= 10; ++i) EXPECT_EQ(s[size_t(i)], s[0] + i);
    EXPECT_EQ(s[0] % 10, 0);
    starts.insert(s[0]);
  }
  EXPECT_EQ(starts.size(), 15u);
  // Epoch 1 (samples 15..29) is a different order of the same windows.
  std::vector<int32_t> e0, e1;
  for (int64_t g = 0; g < 30; ++g) {
    src->sample(g, s.data());
    (g < 15 ? e0 : e1).push_back(s[0]);
  }
  EXPECT_NE(e0, e1);
  EXPECT_EQ(std::set<int32_t>(e1.begin(), e1.end()), starts);
}

TEST(DataSource, DpSlicesAreDisjointAndMatchOneRank) {
  // Expectation: for gbs 8, the samples of ranks 0..dp-1 at one step are the single rank's 8
  // samples, split into dp contiguous slices; no sample index is read by two ranks.
  DataConfig c;
  c.source = "synthetic";
  c.seq_len = 16;
  c.vocab = 97;
  c.seed = 1;
  c.synthetic_windows = 20;
  Diagnostics d;
  auto one = data_open(c, &d);
  ASSERT_TRUE(one);
  const int64_t gbs = 8;
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<int32_t>> single;
    for (int64_t i = 0; i < gbs; ++i) {
      std::vector<int32_t> s(17);
      one->sample(global_sample_index(step, gbs, 1, 0, i), s.data());
      single.push_back(s);
    }
    for (int dp : {2, 4, 8}) {
      std::set<int64_t> seen;
      std::vector<std::vector<int32_t>> joined;
      for (int r = 0; r < dp; ++r) {
        auto rank_src = data_open(c, &d);  // each rank has its own source
        for (int64_t i = 0; i < gbs / dp; ++i) {
          const int64_t g = global_sample_index(step, gbs, dp, r, i);
          EXPECT_TRUE(seen.insert(g).second) << "sample " << g << " read twice";
          std::vector<int32_t> s(17);
          rank_src->sample(g, s.data());
          joined.push_back(s);
        }
      }
      EXPECT_EQ(joined, single) << "dp " << dp << " step " << step;
    }
  }
}

TEST(DataSource, SyntheticIsDeterministicAndInVocab) {
  DataConfig c;
  c.source = "synthetic";
  c.seq_len = 32;
  c.vocab = 50;
  c.seed = 99;
  Diagnostics d;
  auto a = data_open(c, &d), b = data_open(c, &d);
  c.seed = 100;
  auto other = data_open(c, &d);
  std::vector<int32_t> x(33), y(33), z(33);
  for (int64_t g : {0, 5, 2047, 100000}) {
    a->sample(g, x.data());
    b->sample(g, y.data());
    other->sample(g, z.data());
    EXPECT_EQ(x, y);
    EXPECT_NE(x, z);
    for (int32_t t : x) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, 50);
    }
  }
}

TEST(DataSource, VocabLargerThanUint16) {
  // Expectation: a 128,256-token vocabulary (Llama 3) works with synthetic data (ids up to
  // 128,255) and with uint16 shards (every stored id is below it).
  DataConfig c;
  c.source = "synthetic";
  c.seq_len = 256;
  c.vocab = 128256;
  Diagnostics d;
  auto src = data_open(c, &d);
  ASSERT_TRUE(src) << d.to_string();
  std::vector<int32_t> s(257);
  int32_t max_id = 0;
  for (int64_t g = 0; g < 64; ++g) {
    src->sample(g, s.data());
    for (int32_t t : s) max_id = std::max(max_id, t);
  }
  EXPECT_GT(max_id, 65535);
  EXPECT_LT(max_id, 128256);
  auto dir = fresh_dir("bigvocab");
  ASSERT_TRUE(shard_write(shard_path(dir.string(), 0), iota_tokens(600, 65536), &d));
  c.source = dir.string();
  EXPECT_TRUE(data_open(c, &d)) << d.to_string();
}

TEST(DataSource, CollectsEveryBadShard) {
  auto dir = fresh_dir("bad_many");
  write_raw(dir / "a.bin", 1, 1, 4, {1, 2, 3, 4});
  write_raw(dir / "b.bin", 20240520, 1, 40, iota_tokens(10, 10));
  auto t = iota_tokens(40, 10);
  t[20] = 999;
  write_raw(dir / "c.bin", 20240520, 1, 40, t);
  DataConfig c;
  c.source = dir.string();
  c.seq_len = 4;
  c.vocab = 256;
  Diagnostics d;
  EXPECT_EQ(data_open(c, &d), nullptr);
  ASSERT_EQ(d.items().size(), 3u) << d.to_string();
  EXPECT_NE(d.items()[0].message.find("bad magic"), std::string::npos);
  EXPECT_NE(d.items()[1].message.find("truncated"), std::string::npos);
  EXPECT_NE(d.items()[2].message.find("byte offset 1064"), std::string::npos);  // 1024 + 2 * 20
}

TEST(DataSource, MissingFolderAndEmptyFolder) {
  DataConfig c;
  c.source = "/nonexistent/capplan/data";
  c.seq_len = 4;
  c.vocab = 256;
  Diagnostics d;
  EXPECT_EQ(data_open(c, &d), nullptr);
  EXPECT_NE(d.to_string().find("data folder not found"), std::string::npos) << d.to_string();
  Diagnostics d2;
  c.source = fresh_dir("empty").string();
  EXPECT_EQ(data_open(c, &d2), nullptr);
  EXPECT_NE(d2.to_string().find("no .bin token shards"), std::string::npos) << d2.to_string();
}

TEST(DataPrepare, TextToShards) {
  auto dir = fresh_dir("prepare");
  const std::string text1 = "hello, world\n", text2 = "\xff\x01 bytes";
  std::ofstream(dir / "a.txt", std::ios::binary) << text1;
  std::ofstream(dir / "b.txt", std::ios::binary) << text2;
  const std::string out = (dir / "out").string();
  std::vector<std::string> args = {"prepare", "--text", (dir / "a.txt").string(),
                                   (dir / "b.txt").string(), "--out", out, "--shard-bytes", "1040"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  ASSERT_EQ(data_prepare_main(int(argv.size()), argv.data()), 0);
  const std::string said = testing::internal::GetCapturedStdout();
  EXPECT_NE(said.find("wrote 3 shards"), std::string::npos) << said;  // 21 bytes, 8 per shard
  std::vector<std::string> paths;
  Diagnostics d;
  ASSERT_TRUE(dataset_list_shards(out, &paths, &d));
  std::string back;
  std::vector<uint16_t> part;
  for (const auto& p : paths) {
    ASSERT_TRUE(shard_read(p, 256, &part, &d));
    for (uint16_t t : part) back.push_back(char(t));
  }
  EXPECT_EQ(back, text1 + text2);
}

TEST(DataPrepare, BadArgumentsExitTwo) {
  std::vector<std::string> args = {"prepare", "--text", "/nonexistent.txt", "--shard-bytes", "7"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  EXPECT_EQ(data_prepare_main(int(argv.size()), argv.data()), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--shard-bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("/nonexistent.txt"), std::string::npos) << err;
  EXPECT_NE(err.find("no output folder"), std::string::npos) << err;
}
