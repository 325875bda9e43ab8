// The resource limits of capplan, stated in one place: the largest input file, the most layouts
// one search evaluates, the most tasks one step simulation holds, the most Monte-Carlo work one
// run simulation does. Each loader, search and simulation checks its limit here and refuses with
// a message that names it (README "Bad input"). Also the one reader of user files, which
// refuses what is not a regular file (a FIFO, /dev/zero, a folder) and what is over the limit.
#pragma once

#include <cstdint>
#include <string>

namespace capplan {

struct ResourceLimits {
  // Any file capplan reads as input: specs, plans, runs files, HF configs, manifests, metrics.
  static constexpr int64_t max_input_file_bytes = int64_t(64) << 20;  // 64 MiB
  // Nodes (scalars, maps, lists, each key and each value) one YAML or JSON input file may hold,
  // counted by a streaming pass before any node tree is built. yaml-cpp spends ~1.4 us per node
  // scanning and ~2.3 us building its tree: a file at the limit loads in about a second, one over
  // it is refused after ~0.3 s. The largest file in configs/ and tests/data/ holds 2,435.
  static constexpr int64_t max_yaml_nodes = 200'000;
  // Unknown or repeated keys listed one by one per YAML map; the rest are counted in one line.
  static constexpr int64_t max_key_diagnostics = 100;
  // Layouts one search (all node counts of a range together) may evaluate.
  static constexpr int64_t max_search_layouts = 200'000'000;
  // Node counts one range search may cover (--nodes A:B).
  static constexpr int64_t max_search_node_counts = 100'000;
  // Tasks one step simulation may hold (~200 bytes each with its edges and timeline event:
  // ~2 GB at the limit).
  static constexpr int64_t max_simulated_tasks = 10'000'000;
  // Monte-Carlo events of one run simulation: simulated interruptions, plus one per trial, over
  // all trials and checkpoint-interval sweep points (~20 ns each: under a second at the limit).
  static constexpr int64_t max_monte_carlo_events = 20'000'000;
};

// "64 MiB", "200000000": the figures as the messages print them.
std::string describe_bytes(int64_t bytes);

// Reads the whole of `path` into `out`. Refuses (returns false, `error` says why) a path that
// is not a regular file after following symlinks, a file over `max_bytes`, and one that
// cannot be opened or read. Never blocks on a FIFO or a device.
bool read_input_file(const std::string& path, std::string& out, std::string& error,
                     int64_t max_bytes = ResourceLimits::max_input_file_bytes);

// Whether `path` names a regular file (after symlinks); `error` says what it is otherwise
// ("no such file", "not a regular file (a FIFO)", ...). Never opens it.
bool check_input_file(const std::string& path, std::string& error);

}  // namespace capplan
