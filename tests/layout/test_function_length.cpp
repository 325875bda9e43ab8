// Functions that do one thing: no function body outside tests/ runs over 120 lines. Every C++
// source under app/, planner/, runtime/ and simulator/ is read; a definition is a line that closes
// a parameter list and opens a brace (`...) {`, `...) const {`, `...) override {`), which is not a
// control statement or a lambda, and its length runs to the matching closing brace (strings, chars
// and comments are passed over). A failure names the file, the line and the length.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_files.h"

namespace fs = std::filesystem;
using capplan::test::read_text;

namespace {

constexpr int kMaxLines = 120;

// The line without its string and character literals and its // comment.
std::string code_of(const std::string& line, bool& in_block_comment) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (in_block_comment) {
      if (line.compare(i, 2, "*/") == 0) {
        in_block_comment = false;
        ++i;
      }
      continue;
    }
    if (line.compare(i, 2, "/*") == 0) {
      in_block_comment = true;
      ++i;
      continue;
    }
    if (line.compare(i, 2, "//") == 0) break;
    const char c = line[i];
    if (c == '"' || c == '\'') {
      // A raw string R"(...)" on one line, or an ordinary literal with escapes.
      if (c == '"' && i > 0 && line[i - 1] == 'R') {
        const size_t end = line.find(")\"", i);
        i = end == std::string::npos ? line.size() : end + 1;
      } else {
        for (++i; i < line.size() && line[i] != c; ++i)
          if (line[i] == '\\') ++i;
      }
      out += "\"\"";
      continue;
    }
    out += c;
  }
  return out;
}

struct LongFunction {
  std::string where;
  int lines = 0;
};

std::vector<LongFunction> long_functions(const fs::path& file, const std::string& shown) {
  static const std::regex opens(R"(\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>&*, ]+)?\s*\{\s*$)");
  static const std::regex control(R"(^\s*(\}\s*)?(if|for|while|switch|else|do|catch)\b|\b(if|for|while|switch) \()");
  std::vector<std::string> code;
  {
    std::istringstream in(read_text(file.string()));
    bool block = false;
    for (std::string line; std::getline(in, line);) code.push_back(code_of(line, block));
  }
  std::vector<LongFunction> found;
  for (size_t i = 0; i < code.size(); ++i) {
    const std::string& l = code[i];
    if (!std::regex_search(l, opens) || std::regex_search(l, control) || l.find("](") != std::string::npos) continue;
    int depth = 0;
    size_t j = i;
    for (; j < code.size(); ++j) {
      for (char c : code[j]) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (depth <= 0) break;
    }
    const int lines = int(j - i + 1);
    if (lines > kMaxLines) found.push_back({shown + ":" + std::to_string(i + 1), lines});
    i = j;  // functions inside it are part of it
  }
  return found;
}

TEST(FunctionLength, NoFunctionOutsideTestsRunsOverTheLimit) {
  const fs::path root = CAPPLAN_SOURCE_DIR;
  int files = 0;
  std::vector<LongFunction> all;
  for (const char* top : {"app", "planner", "runtime", "simulator"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;
      ++files;
      for (auto& f : long_functions(e.path(), fs::relative(e.path(), root).string())) all.push_back(f);
    }
  }
  EXPECT_GT(files, 50) << "the sources were not found under " << root;
  for (const auto& f : all)
    ADD_FAILURE() << f.where << ": a function of " << f.lines << " lines (the limit is " << kMaxLines
                  << "): split it into named steps";
}

// The scanner itself, on a file written here: a long function is found, a long lambda or if-block
// inside a short one is not taken for a definition, and braces in strings do not count.
TEST(FunctionLength, TheScannerFindsALongFunctionAndOnlyIt) {
  const fs::path dir = capplan::test::scratch_dir("function-length");
  std::ostringstream src;
  src << "int short_one(int x) {\n  if (x) {\n    return \"}}}\"[0];\n  }\n  return 0;\n}\n";
  src << "int long_one(int x) const {\n";
  for (int i = 0; i < 130; ++i) src << "  x += " << i << ";  // {\n";
  src << "  return x;\n}\n";
  std::ofstream(dir / "a.cpp") << src.str();
  const auto found = long_functions(dir / "a.cpp", "a.cpp");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].where, "a.cpp:7");
  EXPECT_EQ(found[0].lines, 133);
}

}  // namespace
