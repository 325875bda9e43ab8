// The mpirun argument vector for capplan-train, and where to find capplan-train. Arguments stay
// a list from here to execve(): nothing is ever joined into a shell string except for display.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "launch/launch.h"

namespace capplan::rt {

std::vector<std::string> build_train_argv(const TrainCommand& c) {
  std::vector<std::string> a;
  a.push_back(c.mpirun);
  if (c.as_root) a.push_back("--allow-run-as-root");
  // More ranks than cores is the normal case here; without binding, the ranks' threads spread
  // over all cores instead of being pinned to one core each.
  a.push_back("--oversubscribe");
  a.push_back("--bind-to");
  a.push_back("none");
  if (!c.hostfile.empty()) {
    a.push_back("--hostfile");
    a.push_back(c.hostfile);
  }
  a.push_back("-np");
  a.push_back(std::to_string(c.options.layout.gpus()));
  a.push_back(c.train_binary);
  const std::vector<std::string> flags = c.options.to_argv();
  a.insert(a.end(), flags.begin(), flags.end());
  return a;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

namespace {
std::string resolved(const std::string& path) {
  if (path.empty()) return path;
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}
}  // namespace

std::string locate_train_binary(const std::string& self_exe, const std::string& build_hint) {
  if (const char* env = std::getenv("CAPPLAN_TRAIN"); env && *env) {
    return find_executable(env);
  }
  if (!self_exe.empty()) {
    const std::string dir = self_exe.substr(0, self_exe.find_last_of('/') + 1);
    // Side by side: installed, and in the build tree's bin/.
    const std::string p = find_executable((dir.empty() ? std::string("./") : dir) + "capplan-train");
    if (!p.empty()) return resolved(p);
  }
  if (!build_hint.empty()) {
    const std::string p = find_executable(build_hint);
    if (!p.empty()) return p;
  }
  return find_executable("capplan-train");
}

std::string locate_default_corpus() {
  std::string dir;
  if (const char* env = std::getenv("CAPPLAN_CORPUS"); env && *env) dir = env;
#ifdef CAPPLAN_CORPUS_DIR
  else dir = CAPPLAN_CORPUS_DIR;
#endif
  if (dir.empty()) return {};
  struct stat st {};
  return ::stat((dir + "/shard_000000.bin").c_str(), &st) == 0 && S_ISREG(st.st_mode) ? dir : std::string();
}

std::string resolve_run_data(const std::string& data) {
  if (!data.empty() && data != "corpus") return data;
  const std::string corpus = locate_default_corpus();
  return corpus.empty() ? "synthetic" : corpus;
}

}  // namespace capplan::rt
