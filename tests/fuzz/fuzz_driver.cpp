// Runs a loader fuzz target without libFuzzer: deterministic mutations (splitmix64 seeded, so
// every run tries the same inputs) of the seed files under the folders given (by default the
// .yaml and .json files; --ext .bin picks others, repeatable). Linked into every fuzz target
// when the compiler has no libFuzzer, and run as a test.
//   fuzz_<target> [--iterations N] [--ext .E]... DIR...
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fragments that stress a YAML loader: structure, special scalars, anchors, tags, huge numbers.
const char* kTokens[] = {":",    "- ",    "{",        "}",       "[",     "]",       "\n",
                         "  ",   ".nan",  "-.inf",    "1e999",   "-1",    "0",       "&a ",
                         "*a",   "!!str ", "\"",      "'",       "#",     "null",    "~",
                         "? ",   "|\n",   "layers: ", "gpu: ",   "dp: ",  "{x: 1}",  "[1, 2]",
                         "\t",   "\xff",  "model: ",  "true",    "1.5T",  "9999999999999999999"};

std::string mutate(std::string s, uint64_t& rng) {
  const int edits = 1 + int(splitmix64(rng) % 4);
  for (int i = 0; i < edits; ++i) {
    const size_t pos = s.empty() ? 0 : size_t(splitmix64(rng) % (s.size() + 1));
    switch (splitmix64(rng) % 5) {
      case 0:  // flip a byte
        if (!s.empty()) s[pos % s.size()] = char(splitmix64(rng) & 0xff);
        break;
      case 1: {  // delete a range
        const size_t n = size_t(splitmix64(rng) % 16);
        if (pos < s.size()) s.erase(pos, n);
        break;
      }
      case 2: {  // insert a token
        const size_t k = size_t(splitmix64(rng) % (sizeof kTokens / sizeof kTokens[0]));
        s.insert(pos, kTokens[k]);
        break;
      }
      case 3: {  // duplicate a range
        if (pos < s.size()) {
          const size_t n = size_t(splitmix64(rng) % 40);
          s.insert(pos, s.substr(pos, n));
        }
        break;
      }
      default:  // truncate
        s.resize(pos);
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 2000;
  std::vector<std::string> corpus, exts, dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
      continue;
    }
    if (a == "--ext" && i + 1 < argc) {
      exts.push_back(argv[++i]);
      continue;
    }
    dirs.push_back(a);
  }
  if (exts.empty()) exts = {".yaml", ".json"};
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  for (const std::string& a : dirs) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || std::find(exts.begin(), exts.end(), ext) == exts.end()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      corpus.push_back(ss.str());
    }
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "%s: no seed files in the folders given\n", name.c_str());
    return 2;
  }
  // Every file as it is, then mutations.
  for (const auto& c : corpus)
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(c.data()), c.size());
  uint64_t rng = 20240601;
  for (long i = 0; i < iterations; ++i) {
    const std::string& base = corpus[size_t(splitmix64(rng) % corpus.size())];
    const std::string input = mutate(base, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("%s: %zu seed files, %ld mutated inputs, no crash\n", name.c_str(), corpus.size(),
              iterations);
  return 0;
}
