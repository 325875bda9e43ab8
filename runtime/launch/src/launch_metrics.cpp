// Reading capplan-train's metrics JSON lines while they are written (MetricsTail) and after
// (read_measured): each line parsed and flattened into one record, and the medians that turn step
// records into a measured step time per phase. The names are io/metrics_schema.h's.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "io/metrics_schema.h"
#include "launch/launch.h"
#include "planner/json.h"
#include "planner/stats.h"

namespace capplan::rt {
namespace {

// Flattens one parsed JSON value into the record: nested keys joined with '.', array elements
// as key.0, key.1, ...; booleans as 1 / 0; strings that spell a non-finite number (older files)
// also as numbers; nulls left out (number() then gives its fallback, unknown by default).
void flatten(const Json& v, const std::string& key, MetricsRecord& out) {
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) flatten(child, key.empty() ? k : key + "." + k, out);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) flatten(v[i], key + "." + std::to_string(i), out);
  } else if (v.is_string()) {
    out.strings[key] = v.get<std::string>();
    if (const double x = json_double(v, 0.0); !std::isfinite(x)) out.numbers[key] = x;
  } else if (v.is_boolean()) {
    out.numbers[key] = v.get<bool>() ? 1 : 0;
  } else if (v.is_number()) {
    out.numbers[key] = v.get<double>();
  }
}

}  // namespace

double MetricsRecord::number(const std::string& key, double fallback) const {
  const auto it = numbers.find(key);
  return it == numbers.end() ? fallback : it->second;
}

std::string MetricsRecord::string(const std::string& key) const {
  const auto it = strings.find(key);
  return it == strings.end() ? std::string() : it->second;
}

std::optional<MetricsRecord> parse_metrics_line(const std::string& line) {
  const std::optional<Json> v = json_parse(line);
  if (!v || !v->is_object()) return std::nullopt;
  MetricsRecord r;
  flatten(*v, "", r);
  r.type = r.string(metrics_schema::kType);
  return r;
}

std::vector<std::string> MetricsTail::read_new_lines() {
  std::vector<std::string> lines;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return lines;
  const uint64_t inode = uint64_t(st.st_ino);
  if (inode != inode_ || uint64_t(st.st_size) < offset_) {  // replaced or truncated: start over
    inode_ = inode;
    offset_ = 0;
    partial_.clear();
  }
  if (uint64_t(st.st_size) == offset_) return lines;
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) return lines;
  if (std::fseek(f, long(offset_), SEEK_SET) != 0) {
    std::fclose(f);
    return lines;
  }
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    offset_ += n;
    partial_.append(buf, n);
  }
  std::fclose(f);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (nl > start) lines.push_back(partial_.substr(start, nl - start));
  }
  partial_.erase(0, start);
  return lines;
}

std::vector<MetricsRecord> MetricsTail::read_new_records() {
  std::vector<MetricsRecord> out;
  for (const auto& line : read_new_lines()) {
    if (auto r = parse_metrics_line(line)) out.push_back(std::move(*r));
  }
  return out;
}

// The planner's memory kinds for the byte counts of capplan-train's placement records.
const std::pair<const char*, const char*> kMemoryKinds[] = {
    {metrics_schema::kParamBytes, "weights"},
    {metrics_schema::kGradBytes, "gradients"},
    {metrics_schema::kSplitGradBytes, "split_gradients"},
    {metrics_schema::kBuffersBytes, "buffers"},
    {metrics_schema::kOptimizerBytes, "optimizer"},
    {metrics_schema::kActivationDeviceBytes, "activations"},
    {metrics_schema::kActivationHostBytes, "offloaded"},
};

MeasuredRun summarize_metrics(const std::vector<MetricsRecord>& records) {
  namespace k = metrics_schema;
  MeasuredRun m;
  std::vector<const MetricsRecord*> steps;
  std::map<int, double> rss;
  for (const auto& r : records) {
    if (r.type == k::kStep) {
      steps.push_back(&r);
    } else if (r.type == k::kSystem) {
      const double rank = r.number(k::kRank, 0);
      const double bytes = r.number(k::kRssBytes);
      if (std::isfinite(bytes) && rank >= 0) rss[int(rank)] = std::max(rss[int(rank)], bytes);
    } else if (r.type == k::kSummary) {
      m.summary_status = r.string(k::kStatus);
      m.summary_reason = r.string(k::kReason);
    } else if (r.type == k::kPlacement) {
      for (const auto& [key, kind] : kMemoryKinds) {
        double value = r.number(key);
        if (!std::isfinite(value)) continue;
        // A rank's activations are its pool of kept activations and the working buffers every
        // micro-batch shares, as the planner counts kept activations and a working set.
        const double working = r.number(metrics_schema::kActivationWorkingBytes);
        if (key == metrics_schema::kActivationDeviceBytes && std::isfinite(working)) value += working;
        double& slot = m.memory_bytes[kind];
        slot = std::max(slot, value);
        m.memory_source = "capplan-train placement records, largest over ranks";
      }
    } else if (r.type == k::kStart) {
      const double peak = r.number(k::kPeakFlopsPerS);
      if (std::isfinite(peak) && peak > 0) m.peak_flops_per_s = peak;
      m.peak_flops_source = r.string(k::kPeakFlopsSource);
    }
  }
  if (!rss.empty()) {
    m.peak_rss_bytes_per_rank.assign(size_t(rss.rbegin()->first + 1), kUnknown);
    for (const auto& [rank, bytes] : rss) m.peak_rss_bytes_per_rank[size_t(rank)] = bytes;
  }
  m.steps = int(steps.size());
  if (steps.empty()) return m;
  m.first_loss = steps.front()->number(k::kLoss);
  m.last_loss = steps.back()->number(k::kLoss);
  // Warm-up: the first step pays for allocation, page faults and cold caches, so it is left out;
  // with five or more steps, the second too (thread pools and MPI connections settle).
  m.warmup_steps = steps.size() >= 5 ? 2 : (steps.size() >= 2 ? 1 : 0);
  std::vector<double> step_time, tokens, bubble, latency;
  std::map<std::string, std::vector<double>> phases;
  for (size_t i = size_t(m.warmup_steps); i < steps.size(); ++i) {
    const MetricsRecord& r = *steps[i];
    latency.push_back(r.number(k::kCoreLatencyNs));
    step_time.push_back(r.number(k::kStepTimeS));
    tokens.push_back(r.number(k::kTokensPerS));
    bubble.push_back(r.number(k::kBubbleFraction));
    for (const auto& [key, value] : r.numbers) {
      // Per-phase times are the keys ending in "_s" other than the step time itself.
      if (key.size() > 2 && key.compare(key.size() - 2, 2, "_s") == 0 && key != k::kStepTimeS &&
          key != k::kTimeS && key.find("per_s") == std::string::npos) {
        phases[key.substr(0, key.size() - 2)].push_back(value);
      }
    }
  }
  m.step_time_s = median(step_time);
  m.tokens_per_s = median(tokens);
  m.bubble_fraction = median(bubble);
  m.core_latency = summarize_core_latency(latency);
  for (auto& [name, values] : phases) m.phase_s[name] = median(values);
  return m;
}

MeasuredRun read_measured(const std::string& metrics_file) {
  MetricsTail tail(metrics_file);
  return summarize_metrics(tail.read_new_records());
}

}  // namespace capplan::rt
