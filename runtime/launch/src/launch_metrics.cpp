// Reading capplan-train's metrics JSON lines while they are written (MetricsTail) and after
// (read_measured): each line parsed by the runtime's JSON reader and flattened into one record,
// and the medians that turn step records into a measured step time per phase.
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "../../io/src/json_lite.h"
#include "launch/launch.h"

namespace capplan::rt {
namespace {

// Flattens one parsed JSON value into the record: nested keys joined with '.', array elements
// as key.0, key.1, ...; booleans as 1 / 0; the metrics writer's "NaN" / "Infinity" strings also
// as numbers (json::Value::as_number); nulls left out.
void flatten(const json::Value& v, const std::string& key, MetricsRecord& out) {
  switch (v.kind) {
    case json::Value::Kind::Object:
      for (const auto& [k, child] : v.obj) flatten(child, key.empty() ? k : key + "." + k, out);
      break;
    case json::Value::Kind::Array:
      for (size_t i = 0; i < v.arr.size(); ++i) flatten(v.arr[i], key + "." + std::to_string(i), out);
      break;
    case json::Value::Kind::String: {
      out.strings[key] = v.str;
      // A string reads as a number only when it spells a non-finite one.
      if (const double x = v.as_number(0.0); !std::isfinite(x)) out.numbers[key] = x;
      break;
    }
    case json::Value::Kind::Number: out.numbers[key] = v.num; break;
    case json::Value::Kind::Bool: out.numbers[key] = v.b ? 1 : 0; break;
    case json::Value::Kind::Null: break;
  }
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return kUnknown;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  json::Value v;
  std::string error;
  if (!json::parse(line, &v, &error) || !v.is_object()) return std::nullopt;
  MetricsRecord r;
  flatten(v, "", r);
  r.type = r.string("type");
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

MeasuredRun summarize_metrics(const std::vector<MetricsRecord>& records) {
  MeasuredRun m;
  std::vector<const MetricsRecord*> steps;
  std::map<int, double> rss;
  for (const auto& r : records) {
    if (r.type == "step") {
      steps.push_back(&r);
    } else if (r.type == "system") {
      const double rank = r.number("rank", 0);
      const double bytes = r.number("rss_bytes");
      if (std::isfinite(bytes) && rank >= 0) rss[int(rank)] = std::max(rss[int(rank)], bytes);
    } else if (r.type == "summary") {
      m.summary_status = r.string("status");
      m.summary_reason = r.string("reason");
    } else if (r.type == "memory" || r.type == "placement") {
      for (const auto& [key, value] : r.numbers) {
        if (key.size() <= 6 || key.compare(key.size() - 6, 6, "_bytes") != 0 || !std::isfinite(value)) continue;
        std::string kind = key.substr(0, key.size() - 6);
        if (kind == "param" || kind == "parameters" || kind == "params") kind = "weights";
        if (kind == "grad") kind = "gradients";
        if (kind == "split_grad") kind = "split_gradients";
        if (kind == "optimizer_state") kind = "optimizer";
        if (kind == "activation_device" || kind == "activation") kind = "activations";
        if (kind == "activation_host" || kind == "host_activations" || kind == "offload") kind = "offloaded";
        double& slot = m.memory_bytes[kind];
        slot = std::max(slot, value);
        m.memory_source = "capplan-train memory records, largest over ranks";
      }
    } else if (r.type == "start") {
      const double peak = r.number("peak_flops_per_s");
      if (std::isfinite(peak) && peak > 0) m.peak_flops_per_s = peak;
      m.peak_flops_source = r.string("peak_flops_source");
    }
  }
  if (!rss.empty()) {
    m.peak_rss_bytes_per_rank.assign(size_t(rss.rbegin()->first + 1), kUnknown);
    for (const auto& [rank, bytes] : rss) m.peak_rss_bytes_per_rank[size_t(rank)] = bytes;
  }
  m.steps = int(steps.size());
  if (steps.empty()) return m;
  m.first_loss = steps.front()->number("loss");
  m.last_loss = steps.back()->number("loss");
  // Warm-up: the first step pays for allocation, page faults and cold caches, so it is left out;
  // with five or more steps, the second too (thread pools and MPI connections settle).
  m.warmup_steps = steps.size() >= 5 ? 2 : (steps.size() >= 2 ? 1 : 0);
  std::vector<double> step_time, tokens, bubble;
  std::map<std::string, std::vector<double>> phases;
  for (size_t i = size_t(m.warmup_steps); i < steps.size(); ++i) {
    const MetricsRecord& r = *steps[i];
    step_time.push_back(r.number("step_time_s"));
    tokens.push_back(r.number("tokens_per_s"));
    bubble.push_back(r.number("bubble_fraction"));
    for (const auto& [key, value] : r.numbers) {
      // Per-phase times are the keys ending in "_s" other than the step time itself.
      if (key.size() > 2 && key.compare(key.size() - 2, 2, "_s") == 0 && key != "step_time_s" &&
          key != "time_s" && key.find("per_s") == std::string::npos) {
        phases[key.substr(0, key.size() - 2)].push_back(value);
      }
    }
  }
  m.step_time_s = median(step_time);
  m.tokens_per_s = median(tokens);
  m.bubble_fraction = median(bubble);
  for (auto& [name, values] : phases) m.phase_s[name] = median(values);
  return m;
}

double parse_trainer_bubble(const std::string& line) {
  if (line.rfind("step ", 0) != 0) return kUnknown;
  const size_t at = line.rfind(" bubble ");
  if (at == std::string::npos) return kUnknown;
  const char* begin = line.c_str() + at + 8;
  double v = 0;
  const auto [end, ec] = std::from_chars(begin, line.c_str() + line.size(), v);
  return ec == std::errc() && end != begin && std::isfinite(v) ? v : kUnknown;
}

MeasuredRun read_measured(const std::string& metrics_file) {
  MetricsTail tail(metrics_file);
  return summarize_metrics(tail.read_new_records());
}

}  // namespace capplan::rt
