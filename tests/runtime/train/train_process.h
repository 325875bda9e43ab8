// capplan-train as a process under mpirun for the backend tests: the output, the exit status and
// the loss of each step it printed. A `timeout` turns a hang into a failure.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace capplan::rt::testing {

struct TrainResult {
  int status = -1;  // exit status of mpirun (-1: did not exit normally)
  std::string output;
  std::map<int, double> losses;  // step -> loss
};

inline std::filesystem::path train_work_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto d = std::filesystem::path(CAPPLAN_BINARY_DIR) / "tests" / "runtime" / "backend_work" /
                 (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::create_directories(d);
  return d;
}

// GPT-2 style or Llama style (GQA, SwiGLU, RMSNorm, RoPE); head dim 8.
inline std::string tiny_model_file(bool llama) {
  const auto p = train_work_dir() / (llama ? "tiny_llama.yaml" : "tiny_gpt.yaml");
  std::ofstream f(p);
  f << "name: " << (llama ? "tiny-llama" : "tiny-gpt") << "\nlayers: 2\nhidden: 32\nheads: 4\nvocab: 97\nseq_len: 16\n";
  if (llama) f << "kv_heads: 2\nffn: swiglu\nnorm: rmsnorm\nposition: rope\n";
  return p.string();
}

inline TrainResult run_train(int np, const std::string& args) {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 " +
                          std::string(CAPPLAN_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " +
                          std::to_string(np) + " " + CAPPLAN_TRAIN + " --threads 1 " + args + " 2>&1";
  TrainResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p)) r.output += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::istringstream is(r.output);
  for (std::string line; std::getline(is, line);) {
    int step = 0, total = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "step %d/%d loss %lf", &step, &total, &loss) == 3) r.losses[step] = loss;
  }
  return r;
}

}  // namespace capplan::rt::testing
