// JSON-lines metrics writer (the names are io/metrics_schema.h's), /proc sampler and the GEMM
// peak probe.
#include "io/metrics.h"

#include "io/metrics_schema.h"
#include "planner/json.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace capplan::rt {

// ---- MetricsWriter ----

MetricsWriter::~MetricsWriter() {
  if (file_ && !summary_written_) {
    SummaryRecord s;
    s.status = "aborted";
    s.reason = "the trainer ended without writing a summary";
    write_summary(s);
  }
  close();
}

bool MetricsWriter::open(const std::string& path, std::string* error, bool append) {
  close();
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_) {
    *error = path + ": cannot open for writing: " + std::strerror(errno);
    return false;
  }
  summary_written_ = false;
  return true;
}

void MetricsWriter::write_line(const std::string& json) {
  if (!file_) return;
  std::string line = json + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

void MetricsWriter::write_record(const Json& record) { write_line(json_dump(record, false)); }

void MetricsWriter::write_start(const StartRecord& r) {
  namespace k = metrics_schema;
  Json j;
  j[k::kType] = k::kStart;
  j[k::kModel] = r.model;
  j[k::kParameters] = r.parameters;
  j[k::kWorld] = r.world;
  j[k::kDp] = r.dp;
  j[k::kTp] = r.tp;
  j[k::kPp] = r.pp;
  j[k::kZero] = r.zero;
  j[k::kMbs] = r.mbs;
  j[k::kGbs] = r.gbs;
  j[k::kSeq] = r.seq_len;
  j[k::kThreads] = r.threads;
  j[k::kBatchSplit] = r.batch_split;
  j[k::kBackend] = r.backend;
  j[k::kRankHosts] = r.rank_hosts;
  j[k::kPeakFlopsPerS] = json_number(r.peak_flops_per_s > 0 ? r.peak_flops_per_s : std::nan(""));
  j[k::kPeakFlopsSource] = r.peak_flops_source.empty() ? "unknown" : r.peak_flops_source;
  j[k::kResumedFromStep] = r.resumed_from_step;
  write_record(j);
}

void MetricsWriter::write_step(const StepRecord& r) {
  namespace k = metrics_schema;
  Json j;
  j[k::kType] = k::kStep;
  j[k::kStepNumber] = r.step;
  j[k::kLoss] = json_number(r.loss);
  j[k::kTokensPerS] = json_number(r.tokens_per_s);
  j[k::kLr] = json_number(r.lr);
  j[k::kGradNorm] = json_number(r.grad_norm);
  j[k::kStepTimeS] = json_number(r.step_time_s);
  j[k::kModelFlopsPerS] = json_number(r.model_flops_per_s);
  j[k::kMfu] = json_number(r.mfu);
  j[k::kPeakFlopsSource] = r.peak_flops_source.empty() ? "unknown" : r.peak_flops_source;
  j[k::kForwardS] = json_number(r.forward_s);
  j[k::kBackwardS] = json_number(r.backward_s);
  j[k::kOptimizerS] = json_number(r.optimizer_s);
  j[k::kDpCommS] = json_number(r.dp_comm_s);
  j[k::kDataS] = json_number(r.data_s);
  j[k::kGemmS] = json_number(r.gemm_s);
  j[k::kComputeS] = json_number(r.compute_s);
  j[k::kRecomputeS] = json_number(r.recompute_s);
  j[k::kTpCommS] = json_number(r.tp_comm_s);
  j[k::kPpCommS] = json_number(r.pp_comm_s);
  j[k::kBubbleS] = json_number(r.bubble_s);
  j[k::kOffloadS] = json_number(r.offload_s);
  j[k::kEpCommS] = json_number(r.ep_comm_s);
  j[k::kCpCommS] = json_number(r.cp_comm_s);
  j[k::kRemainderS] = json_number(r.remainder_s);
  j[k::kTermsRank] = r.terms_rank;
  if (std::isfinite(r.split_wait_s)) j[k::kSplitWaitS] = json_number(r.split_wait_s);
  j[k::kBubbleFraction] = json_number(r.bubble_fraction);
  if (std::isfinite(r.core_latency_ns)) j[k::kCoreLatencyNs] = json_number(r.core_latency_ns);
  write_record(j);
}

void MetricsWriter::write_summary(const SummaryRecord& r) {
  namespace k = metrics_schema;
  Json j;
  j[k::kType] = k::kSummary;
  j[k::kStatus] = r.status;
  j[k::kReason] = r.reason;
  j[k::kSteps] = r.steps;
  j[k::kWallS] = json_number(r.wall_s);
  j[k::kFinalLoss] = json_number(r.final_loss);
  j[k::kMeanTokensPerS] = json_number(r.mean_tokens_per_s);
  write_record(j);
  summary_written_ = true;
}

void MetricsWriter::close() {
  if (file_) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

// ---- /proc ----

namespace {

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Value of "Key:" in a "Key: value" file (/proc/self/status, /proc/self/io); -1 when absent.
int64_t field_of(const std::string& text, const std::string& key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    if (text.compare(pos, key.size(), key) == 0 && pos + key.size() < eol &&
        text[pos + key.size()] == ':')
      return std::strtoll(text.c_str() + pos + key.size() + 1, nullptr, 10);
    pos = eol + 1;
  }
  return -1;
}

}  // namespace

ProcSample proc_sample_self() {
  ProcSample s;
  s.time_s = monotonic_s();
  // /proc/self/stat: "pid (comm) state ..."; comm may hold spaces and ')', so parse after the last
  // ')'. Fields 14 and 15 (utime, stime) are then the 12th and 13th tokens (proc(5)).
  const std::string stat = slurp("/proc/self/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return s;
  std::istringstream is(stat.substr(close + 2));
  std::string tok;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && is >> tok; ++i) {
    if (i == 14) utime = std::strtoull(tok.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(tok.c_str(), nullptr, 10);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  s.cpu_time_s = double(utime + stime) / double(ticks > 0 ? ticks : 100);
  const int64_t rss_kib = field_of(slurp("/proc/self/status"), "VmRSS");
  s.rss_bytes = rss_kib >= 0 ? rss_kib * 1024 : 0;
  // read_bytes/write_bytes count storage I/O; they need task I/O accounting and can be absent (or
  // unreadable in containers), in which case rchar/wchar (all read()/write() bytes) stand in.
  const std::string io = slurp("/proc/self/io");
  int64_t rb = field_of(io, "read_bytes"), wb = field_of(io, "write_bytes");
  if (rb < 0) rb = field_of(io, "rchar");
  if (wb < 0) wb = field_of(io, "wchar");
  s.io_read_bytes = std::max<int64_t>(rb, 0);
  s.io_write_bytes = std::max<int64_t>(wb, 0);
  s.ok = true;
  return s;
}

SystemSampler::SystemSampler(int rank, int cores_expected, int interval_ms, ExtraFields extra)
    : rank_(rank), interval_ms_(std::max(interval_ms, 1)), extra_(std::move(extra)) {
  if (cores_expected <= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    cores_expected = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  cores_expected_ = std::max(cores_expected, 1);
}

SystemSampler::~SystemSampler() { stop(); }

void SystemSampler::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  stop_ = false;
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

void SystemSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
}

std::vector<std::string> SystemSampler::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.swap(lines_);
  return out;
}

void SystemSampler::run() {
  ProcSample prev = proc_sample_self();
  const double t0 = prev.time_s;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_; }))
      break;
    lock.unlock();
    ProcSample now = proc_sample_self();
    const double dt = now.time_s - prev.time_s;
    const double cores_used = dt > 0 ? (now.cpu_time_s - prev.cpu_time_s) / dt : 0;
    namespace k = metrics_schema;
    Json j;
    j[k::kType] = k::kSystem;
    j[k::kRank] = rank_;
    j[k::kTimeS] = json_number(now.time_s - t0);
    j[k::kCpuUtil] = json_number(cores_used / cores_expected_);
    j[k::kCpuCoresUsed] = json_number(cores_used);
    j[k::kRssBytes] = now.rss_bytes;
    j[k::kIoReadBytes] = now.io_read_bytes;
    j[k::kIoWriteBytes] = now.io_write_bytes;
    if (extra_) extra_(j);
    prev = now;
    lock.lock();
    lines_.push_back(json_dump(j, false));
    if (lines_.size() > 100000) lines_.erase(lines_.begin());  // never drained: stay bounded
  }
}

// ---- peak probe ----

PeakFlops measure_peak_flops(const GemmFn& gemm, int n, int repeats, int threads) {
  PeakFlops p;
  if (!gemm || n <= 0 || repeats <= 0) {
    p.source = "unknown";
    return p;
  }
  const size_t nn = size_t(n) * size_t(n);
  std::vector<float> a(nn), b(nn), c(nn, 0.0f);
  uint64_t x = 0x243F6A8885A308D3ull;  // fixed fill, values in [-1, 1)
  for (size_t i = 0; i < nn; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = float(int32_t(x >> 40) % 1000) / 1000.0f;
    b[i] = float(int32_t(x >> 20) % 1000) / 1000.0f;
  }
  gemm(n, n, n, a.data(), b.data(), c.data());  // warm-up: thread pool, page faults
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = monotonic_s();
    gemm(n, n, n, a.data(), b.data(), c.data());
    const double dt = monotonic_s() - t0;
    if (dt > 0) best = std::max(best, 2.0 * double(n) * n * n / dt);
  }
  p.flops_per_s = best;
  p.source = "measured: fp32 GEMM probe " + std::to_string(n) + "^3, best of " +
             std::to_string(repeats) +
             (threads > 0 ? ", " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s")
                          : std::string());
  return p;
}

double model_flops_per_token(int64_t parameters, int layers, int seq_len, int attention_width) {
  return 6.0 * double(parameters) + 12.0 * double(layers) * double(attention_width) * double(seq_len);
}

}  // namespace capplan::rt
