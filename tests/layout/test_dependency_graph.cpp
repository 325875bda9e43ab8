// The dependency graph the README draws, checked against the build: every target_link_libraries
// of every CMakeLists.txt in the tree is read, each capplan target is mapped to its module (the
// folder it lives in), and an arrow between two modules that the README's graph does not allow
// (directly or through other arrows) is a failure naming the file, the line and the arrow. So are
// Qt below app/ and MPI outside the trainer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_files.h"

namespace fs = std::filesystem;
using capplan::test::read_text;

namespace {

using Graph = std::map<std::string, std::set<std::string>>;  // module -> modules it may link

// The arrows of the README's "Dependency graph" block: lines such as "app → launch → simulator".
Graph readme_graph(const std::string& readme) {
  Graph g;
  const size_t at = readme.find("### Dependency graph");
  if (at == std::string::npos) return g;
  const size_t open = readme.find("```", at);
  const size_t close = open == std::string::npos ? open : readme.find("```", open + 3);
  if (close == std::string::npos) return g;
  std::istringstream block(readme.substr(open + 3, close - open - 3));
  for (std::string line; std::getline(block, line);) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::string> chain;
    std::string word;
    std::istringstream words(line);
    while (words >> word) {
      if (word != "→") chain.push_back(word);
    }
    for (size_t i = 0; i + 1 < chain.size(); ++i) g[chain[i]].insert(chain[i + 1]);
  }
  return g;
}

// What each module may reach through one or more arrows.
Graph closure(Graph g) {
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& [from, tos] : g) {
      for (const std::string& via : std::set<std::string>(tos)) {
        for (const std::string& to : g[via]) grew |= tos.insert(to).second;
      }
    }
  }
  return g;
}

// The module a target or link item belongs to; empty for anything outside the project.
std::string module_of(const std::string& name) {
  static const std::map<std::string, std::string> modules = {
      {"capplan_planner", "planner"},   {"capplan::planner", "planner"},
      {"capplan_simulator", "simulator"}, {"capplan::simulator", "simulator"},
      {"capplan_io", "io"},             {"capplan::io", "io"},
      {"capplan_train", "train"},       {"capplan::train", "train"},
      {"capplan_train_cuda", "train"},
      {"capplan-train", "train"},       {"capplan_launch", "launch"},
      {"capplan::launch", "launch"},    {"capplan", "app"},
      {"capplan-gui", "app"},           {"capplan_gui_core", "app"},
  };
  const auto it = modules.find(name);
  return it == modules.end() ? std::string() : it->second;
}

struct Link {
  std::string file;
  int line = 0;
  std::string target;
  std::vector<std::string> items;
};

// Every target_link_libraries(TARGET items...) call of one CMakeLists.txt (calls may span lines;
// comments are dropped).
std::vector<Link> links_of(const std::string& file, const std::string& text) {
  std::vector<Link> out;
  std::string clean;
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    const size_t hash = l.find('#');
    if (hash != std::string::npos) l.resize(hash);
    clean += l + "\n";
  }
  const std::string key = "target_link_libraries(";
  for (size_t at = clean.find(key); at != std::string::npos; at = clean.find(key, at + 1)) {
    const size_t end = clean.find(')', at);
    if (end == std::string::npos) break;
    std::istringstream words(clean.substr(at + key.size(), end - at - key.size()));
    Link link;
    link.file = file;
    link.line = 1 + int(std::count(clean.begin(), clean.begin() + long(at), '\n'));
    words >> link.target;
    for (std::string w; words >> w;) {
      if (w != "PUBLIC" && w != "PRIVATE" && w != "INTERFACE") link.items.push_back(w);
    }
    out.push_back(std::move(link));
  }
  return out;
}

// "file:line: a → b" for each arrow the graph does not allow, Qt below app/ and MPI outside train.
std::vector<std::string> violations(const std::vector<Link>& links, const Graph& allowed) {
  const Graph reach = closure(allowed);
  std::vector<std::string> out;
  for (const Link& l : links) {
    const std::string from = module_of(l.target);
    if (from.empty()) continue;
    for (const std::string& item : l.items) {
      const std::string where = l.file + ":" + std::to_string(l.line) + ": " + l.target + " → " + item;
      const std::string to = module_of(item);
      if (!to.empty() && to != from) {
        const auto it = reach.find(from);
        if (it == reach.end() || !it->second.count(to)) {
          out.push_back(where + " (" + from + " → " + to + " is not in the README's graph)");
        }
      }
      if (item.rfind("Qt6::", 0) == 0 && from != "app") out.push_back(where + " (Qt below app/)");
      if (item.rfind("MPI::", 0) == 0 && from != "train") out.push_back(where + " (MPI outside the trainer)");
    }
  }
  return out;
}

}  // namespace

// Expectation: the README's block gives app → launch → simulator → planner, train → io → planner
// and launch → io, so app reaches planner through launch and simulator, and train never reaches
// the simulator or the launcher.
TEST(DependencyGraph, ReadmeDrawsTheOneWayGraph) {
  const Graph g = closure(readme_graph(read_text(fs::path(CAPPLAN_SOURCE_DIR) / "README.md")));
  ASSERT_FALSE(g.empty()) << "README.md has no \"### Dependency graph\" block";
  EXPECT_TRUE(g.at("app").count("planner"));
  EXPECT_TRUE(g.at("launch").count("io"));
  EXPECT_TRUE(g.at("train").count("planner"));
  EXPECT_FALSE(g.at("train").count("simulator"));
  EXPECT_FALSE(g.at("train").count("launch"));
  EXPECT_FALSE(g.at("launch").count("train"));
  EXPECT_FALSE(g.count("planner") && !g.at("planner").empty());
}

// Expectation: a CMakeLists.txt where the trainer links the simulator, the launcher links MPI and
// the planner links Qt gives three violations, each naming its file and line; allowed arrows give
// none.
TEST(DependencyGraph, ForbiddenArrowsAreFound) {
  const Graph g = readme_graph("### Dependency graph\n```\napp → launch → simulator → planner\n"
                               "train → io → planner\nlaunch → io\n```\n");
  const std::string cmake =
      "target_link_libraries(capplan_train PUBLIC capplan::io\n  PRIVATE capplan::simulator)\n"
      "target_link_libraries(capplan_launch PRIVATE MPI::MPI_CXX capplan::io)  # comment (\n"
      "target_link_libraries(capplan_planner PRIVATE Qt6::Core)\n"
      "target_link_libraries(capplan PRIVATE capplan::launch capplan::planner Threads::Threads)\n";
  const auto v = violations(links_of("x/CMakeLists.txt", cmake), g);
  ASSERT_EQ(v.size(), 3u) << testing::PrintToString(v);
  EXPECT_NE(v[0].find("x/CMakeLists.txt:1: capplan_train → capplan::simulator"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("x/CMakeLists.txt:3: capplan_launch → MPI::MPI_CXX (MPI outside the trainer)"),
            std::string::npos)
      << v[1];
  EXPECT_NE(v[2].find("(Qt below app/)"), std::string::npos) << v[2];
}

// Expectation: no target_link_libraries in the tree breaks the README's graph, and the tree has
// the library targets the graph speaks of (so the check cannot pass by reading nothing).
TEST(DependencyGraph, TheBuildFollowsTheReadme) {
  const fs::path root = CAPPLAN_SOURCE_DIR;
  const Graph g = readme_graph(read_text(root / "README.md"));
  std::vector<Link> links;
  for (const char* top : {"planner", "simulator", "runtime", "app"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.path().filename() != "CMakeLists.txt") continue;
      const auto found = links_of(fs::relative(e.path(), root).string(), read_text(e.path()));
      links.insert(links.end(), found.begin(), found.end());
    }
  }
  std::set<std::string> modules;
  for (const Link& l : links) modules.insert(module_of(l.target));
  for (const char* m : {"planner", "simulator", "io", "train", "launch", "app"}) {
    EXPECT_TRUE(modules.count(m)) << "no target_link_libraries found for " << m;
  }
  const auto v = violations(links, g);
  EXPECT_TRUE(v.empty()) << testing::PrintToString(v);
}
