// Device profiles: their fits, YAML form and checks (device_profile.h).
#include "planner/device_profile.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "planner/stats.h"
#include "yaml_reader.h"

namespace capplan {
namespace {

// Ordinary least squares of y = a + b x; b only (through the origin) when fewer than two distinct x.
void line_fit(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w,
              double& a, double& b) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sw += w[i];
    sx += w[i] * x[i];
    sy += w[i] * y[i];
    sxx += w[i] * x[i] * x[i];
    sxy += w[i] * x[i] * y[i];
  }
  const double det = sw * sxx - sx * sx;
  if (x.size() >= 2 && std::abs(det) > 1e-30 * std::max(1.0, sw * sxx)) {
    b = (sw * sxy - sx * sy) / det;
    a = (sy - b * sx) / sw;
  } else {
    a = 0;
    b = sxx > 0 ? sxy / sxx : 0;
  }
  if (b <= 0 && sxx > 0) {  // noise swamped the slope: the line through the origin
    a = 0;
    b = sxy / sxx;
  }
  if (a < 0) {  // a negative intercept is noise too
    a = 0;
    b = sxx > 0 ? sxy / sxx : 0;
  }
}

double bus_factor(const std::string& op, int n) {
  if (n <= 1) return 0;
  const double r = double(n - 1) / n;
  if (op == "all-reduce") return 2 * r;
  if (op == "send-recv") return 1;
  return r;
}

// Shortest text that reads back to the same double, independent of the locale.
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A lockstep timing's gradient exchange right after compute, as flow-map keys ("" if not measured).
std::string gradient_exchange_yaml(const LockstepTiming& l) {
  if (l.gradient_exchange_bytes <= 0) return "";
  return ", gradient_exchange_bytes: " + num(l.gradient_exchange_bytes) +
         ", gradient_exchange_seconds: " + num(l.gradient_exchange_s) +
         (l.zero1_exchange_s > 0 ? ", zero1_exchange_seconds: " + num(l.zero1_exchange_s) : std::string());
}

}  // namespace

double DeviceProfile::gemm_seconds(double m, double n, double k) const {
  // Two GEMMs of a layer can share a shape (a weight gradient [in, out] over tok tokens is the
  // forward's [tok, out] over in when tok = in) while differing in transposes: their mean.
  double sum = 0;
  int count = 0;
  for (const GemmTiming& g : gemms)
    if (double(g.m) == m && double(g.n) == n && double(g.k) == k) {
      sum += g.seconds;
      ++count;
    }
  return count > 0 ? sum / count : -1;
}

double DeviceProfile::kernel_seconds(const std::string& name) const {
  for (const KernelTiming& k : kernels)
    if (k.name == name) return k.seconds;
  return -1;
}

namespace {
// The seconds of the entries of `timings` that `keep` accepts, linear in their bytes between the
// measured sizes just below and just above `bytes` (beyond the largest: the largest two's line, at
// least the size below's time; below the smallest: the smallest's time; one size: in proportion
// to its bytes); -1 where `keep` accepts none. One pass (the cost model asks for every collective
// of every layout it prices).
template <typename Timing, typename Keep>
double linear_in_bytes(const std::vector<Timing>& timings, Keep keep, double bytes) {
  const Timing *below = nullptr, *above = nullptr, *smallest = nullptr, *last = nullptr, *second = nullptr;
  for (const Timing& c : timings) {
    if (!keep(c) || c.bytes <= 0 || c.seconds <= 0) continue;
    if (c.bytes <= bytes && (!below || c.bytes > below->bytes)) below = &c;
    if (c.bytes > bytes && (!above || c.bytes < above->bytes)) above = &c;
    if (!smallest || c.bytes < smallest->bytes) smallest = &c;
    if (!last || c.bytes > last->bytes) {
      second = last;
      last = &c;
    } else if (!second || c.bytes > second->bytes) {
      second = &c;
    }
  }
  if (!smallest) return -1;
  if (!below) return smallest->seconds;
  const Timing* lo = above ? below : second;
  const Timing* hi = above ? above : last;
  if (!lo || lo == hi) return hi->seconds * bytes / hi->bytes;  // one measured size
  const double t = lo->seconds + (hi->seconds - lo->seconds) * (bytes - lo->bytes) / (hi->bytes - lo->bytes);
  return std::max(below->seconds, t);
}
}  // namespace

double DeviceProfile::collective_seconds(const std::string& op, int ranks, double bytes, bool cold) const {
  // The warm times where cold ones were asked for and the profile has none.
  const double t = linear_in_bytes(
      collectives, [&](const CollectiveTiming& c) { return c.op == op && c.ranks == ranks && c.cold == cold; }, bytes);
  return t < 0 && cold ? collective_seconds(op, ranks, bytes, false) : t;
}

double DeviceProfile::shared_exchange_s(int ranks, int group, double bytes) const {
  for (const SharedCoresTiming& s : shared)
    if (s.ranks == ranks)
      return linear_in_bytes(s.exchange, [group](const SharedExchangeTiming& e) { return e.group == group; }, bytes);
  return -1;
}

double DeviceProfile::exchange_after_compute(int ranks, int group, bool zero1) const {
  const LockstepTiming* l = nullptr;
  double own = -1;
  if (cores > 0 && ranks > cores) {
    for (const SharedCoresTiming& s : shared)
      for (const LockstepTiming& g : s.lockstep)
        if (s.ranks == ranks && g.group == group) l = &g;
    if (l) own = shared_exchange_s(ranks, group, l->gradient_exchange_bytes);
  } else if (group == 2 && this->ranks == 2) {
    l = &lockstep;
    own = collective_seconds("gradient-exchange", 2, l->gradient_exchange_bytes, true);
  }
  if (!l || l->gradient_exchange_bytes <= 0 || own <= 0) return 1.0;
  return std::max(1.0, (zero1 && l->zero1_exchange_s > 0 ? l->zero1_exchange_s : l->gradient_exchange_s) / own);
}

namespace {

// `value` of the shared measurements interpolated linearly in their ranks around `ranks` (the
// nearest beyond the measured range); -1 where `value` gives none (negative).
template <typename Value>
double interpolate_in_ranks(const std::vector<SharedCoresTiming>& shared, int ranks, Value value) {
  const SharedCoresTiming *lo = nullptr, *hi = nullptr;
  for (const SharedCoresTiming& s : shared) {
    if (value(s) < 0) continue;
    if (s.ranks <= ranks && (!lo || s.ranks > lo->ranks)) lo = &s;
    if (s.ranks >= ranks && (!hi || s.ranks < hi->ranks)) hi = &s;
  }
  if (!lo && !hi) return -1;
  if (!lo || !hi || lo == hi) return value(lo ? *lo : *hi);
  const double f = double(ranks - lo->ranks) / double(hi->ranks - lo->ranks);
  return value(*lo) + f * (value(*hi) - value(*lo));
}

// The measured lockstep group nearest in size to `group`; nullptr when none.
const LockstepTiming* nearest_group(const SharedCoresTiming& s, int group) {
  const LockstepTiming* best = nullptr;
  for (const LockstepTiming& l : s.lockstep)
    if (l.allreduce_bytes > 0 && (!best || std::abs(l.group - group) < std::abs(best->group - group))) best = &l;
  return best;
}

}  // namespace

double DeviceProfile::shared_allreduce_s(int ranks, int group) const {
  return interpolate_in_ranks(shared, ranks, [group](const SharedCoresTiming& s) {
    const LockstepTiming* l = nearest_group(s, group);
    return l ? l->allreduce_s : -1.0;
  });
}

double DeviceProfile::shared_compute_stretch(int ranks, int group) const {
  return interpolate_in_ranks(shared, ranks, [group](const SharedCoresTiming& s) {
    const LockstepTiming* l = nearest_group(s, group);
    return l && l->compute_stretch >= 1 ? l->compute_stretch : -1.0;
  });
}

double DeviceProfile::shared_free_efficiency(int ranks) const {
  return interpolate_in_ranks(shared, ranks, [](const SharedCoresTiming& s) {
    return s.free_efficiency > 0 ? s.free_efficiency : -1.0;
  });
}

double DeviceProfile::shared_optimizer_stretch(int ranks) const {
  return interpolate_in_ranks(shared, ranks, [](const SharedCoresTiming& s) {
    return s.optimizer_bytes > 0 && s.optimizer_s > 0 && s.optimizer_alone_s > 0 ? s.optimizer_s / s.optimizer_alone_s
                                                                                 : -1.0;
  });
}

double DeviceProfile::shared_handoff_s(int ranks, bool lockstep) const {
  return interpolate_in_ranks(shared, ranks, [lockstep](const SharedCoresTiming& s) {
    if (lockstep && s.handoff_lockstep_s > 0) return s.handoff_lockstep_s;
    return s.handoff_s > 0 ? s.handoff_s : -1.0;
  });
}

const CollectiveFit* DeviceProfile::fit(const std::string& op, int n) const {
  const CollectiveFit* best = nullptr;
  for (const CollectiveFit& f : fits)
    if (f.op == op && (!best || std::abs(f.ranks - n) < std::abs(best->ranks - n))) best = &f;
  return best;
}

void fit_device_profile(DeviceProfile& p) {
  // GEMMs: t = t0 + 2MNK / peak, each sample weighted by 1/t^2 so that the fit minimises relative
  // error (a small GEMM's 10 % counts as much as a large one's).
  {
    std::vector<double> x, y, w;
    for (const GemmTiming& g : p.gemms) {
      if (g.seconds <= 0) continue;
      x.push_back(2.0 * double(g.m) * double(g.n) * double(g.k));
      y.push_back(g.seconds);
      w.push_back(1.0 / (g.seconds * g.seconds));
    }
    double a = 0, b = 0;
    line_fit(x, y, w, a, b);
    p.gemm_peak_gflops = b > 0 ? 1.0 / b / 1e9 : 0;
    p.gemm_overhead_us = a * 1e6;
  }
  // Memory-bound kernels: bandwidth = bytes / seconds over all of them (their times add), but the
  // gradient norm's sums (a read of the gradients the cost model prices by their own times, warm
  // or cold, not by the line).
  {
    double bytes = 0, seconds = 0;
    for (const KernelTiming& k : p.kernels)
      if (k.bytes > 0 && k.seconds > 0 && k.name.find("attention") == std::string::npos &&
          k.name.rfind("gradient norm", 0) != 0) {
        bytes += k.bytes;
        seconds += k.seconds;
      }
    p.memory_gbyte_per_s = seconds > 0 ? bytes / seconds / 1e9 : 0;
  }
  // Collectives: per op and group size, t = latency + bus_bytes / bandwidth, over the warm times.
  p.fits.clear();
  for (const CollectiveTiming& c : p.collectives) {
    if (c.cold) continue;
    bool seen = false;
    for (const CollectiveFit& f : p.fits) seen = seen || (f.op == c.op && f.ranks == c.ranks);
    if (seen) continue;
    std::vector<double> x, y, w;
    for (const CollectiveTiming& d : p.collectives)
      if (d.op == c.op && d.ranks == c.ranks && !d.cold && d.seconds > 0) {
        x.push_back(bus_factor(d.op, d.ranks) * d.bytes);
        y.push_back(d.seconds);
        w.push_back(1.0 / (d.seconds * d.seconds));
      }
    double a = 0, b = 0;
    line_fit(x, y, w, a, b);
    CollectiveFit f;
    f.op = c.op;
    f.ranks = c.ranks;
    f.bandwidth_gbyte_per_s = b > 0 ? 1.0 / b / 1e9 : 0;
    f.latency_us = a * 1e6;
    p.fits.push_back(f);
  }
}

bool core_latency_moved(double a_ns, double b_ns) {
  const bool measured = std::isfinite(a_ns) && std::isfinite(b_ns) && a_ns > 0 && b_ns > 0;
  return measured && (a_ns > 2.0 * b_ns || b_ns > 2.0 * a_ns);
}

CoreLatency summarize_core_latency(const std::vector<double>& samples_ns) {
  std::vector<double> v;
  for (double x : samples_ns)
    if (std::isfinite(x) && x > 0) v.push_back(x);
  CoreLatency c;
  if (v.empty()) return c;
  c.samples = int(v.size());
  c.median_ns = median(v);
  c.min_ns = *std::min_element(v.begin(), v.end());
  c.max_ns = *std::max_element(v.begin(), v.end());
  for (double x : v) c.apart += core_latency_moved(x, c.median_ns);
  return c;
}

std::string device_profile_yaml(const DeviceProfile& p) {
  using detail::yaml_quote;
  std::ostringstream o;
  o << "# capplan device profile: kernel and collective times measured on one device, and the\n"
       "# curves fitted to them (capplan profile --measure). Times in seconds, bytes per rank.\n";
  o << "device_profile:\n";
  o << "  device: " << yaml_quote(p.device) << "\n";
  o << "  gpu: " << yaml_quote(p.gpu) << "\n";
  o << "  backend: " << yaml_quote(p.backend) << "\n";
  o << "  created_utc: " << yaml_quote(p.created_utc) << "\n";
  o << "  how: " << yaml_quote(p.how) << "\n";
  o << "  ranks: " << p.ranks << "\n";
  if (p.cores > 0) o << "  cores: " << p.cores << "   # of the host the ranks shared\n";
  if (p.threads > 0) o << "  threads: " << p.threads << "   # backend threads of each rank\n";
  if (p.peak_rank_bytes > 0) o << "  peak_rank_bytes: " << num(p.peak_rank_bytes) << "   # one rank's largest resident set\n";
  if (p.spread.rounds > 0)
    o << "  round_spread: {rounds: " << p.spread.rounds << ", gemms: " << num(p.spread.gemms)
      << ", kernels: " << num(p.spread.kernels) << ", collectives: " << num(p.spread.collectives)
      << "}   # relative standard deviation of each round's summed times\n";
  if (p.core_latency.samples > 0)
    o << "  core_latency: {samples: " << p.core_latency.samples << ", median_ns: " << num(p.core_latency.median_ns)
      << ", min_ns: " << num(p.core_latency.min_ns) << ", max_ns: " << num(p.core_latency.max_ns)
      << ", apart: " << p.core_latency.apart
      << (p.core_latency.lockstep_before_ns > 0 ? ", lockstep_before_ns: " + num(p.core_latency.lockstep_before_ns) +
                                                      ", lockstep_after_ns: " + num(p.core_latency.lockstep_after_ns)
                                                : std::string())
      << "}   # a cache line from one rank's core to the other's, one way\n";
  if (p.lockstep.allreduce_bytes > 0)
    o << "  lockstep: {allreduce_bytes: " << num(p.lockstep.allreduce_bytes) << ", allreduce_seconds: "
      << num(p.lockstep.allreduce_s)
      << (p.lockstep.exchange_bytes > 0 ? ", exchange_bytes: " + num(p.lockstep.exchange_bytes) +
                                              ", exchange_seconds: " + num(p.lockstep.exchange_s)
                                        : std::string())
      << gradient_exchange_yaml(p.lockstep)
      << (p.lockstep.sp_bytes > 0 ? ", sp_bytes: " + num(p.lockstep.sp_bytes) + ", sp_seconds: " + num(p.lockstep.sp_s)
                                  : std::string())
      << ", how: " << yaml_quote(p.lockstep.how) << "}\n";
  if (!p.shared.empty()) o << "  shared_cores:\n";
  for (const SharedCoresTiming& sc : p.shared) {
    o << "    - {ranks: " << sc.ranks << ", free_efficiency: " << num(sc.free_efficiency)
      << ", handoff_seconds: " << num(sc.handoff_s)
      << (sc.handoff_lockstep_s > 0 ? ", handoff_lockstep_seconds: " + num(sc.handoff_lockstep_s) : "") << ", lockstep: [";
    for (size_t i = 0; i < sc.lockstep.size(); ++i)
      o << (i ? ", " : "") << "{group: " << sc.lockstep[i].group
        << ", allreduce_bytes: " << num(sc.lockstep[i].allreduce_bytes)
        << ", allreduce_seconds: " << num(sc.lockstep[i].allreduce_s)
        << (sc.lockstep[i].compute_stretch > 0 ? ", compute_stretch: " + num(sc.lockstep[i].compute_stretch) : "")
        << gradient_exchange_yaml(sc.lockstep[i]) << "}";
    o << "]";
    if (!sc.exchange.empty()) {
      o << ", exchange: [";
      for (size_t i = 0; i < sc.exchange.size(); ++i)
        o << (i ? ", " : "") << "{group: " << sc.exchange[i].group << ", bytes: " << num(sc.exchange[i].bytes)
          << ", seconds: " << num(sc.exchange[i].seconds) << "}";
      o << "]";
    }
    if (sc.optimizer_bytes > 0)
      o << ", optimizer_bytes: " << num(sc.optimizer_bytes) << ", optimizer_seconds: " << num(sc.optimizer_s)
        << ", optimizer_alone_seconds: " << num(sc.optimizer_alone_s);
    o << ", how: " << yaml_quote(sc.how) << "}\n";
  }
  o << "  shape: {model: " << yaml_quote(p.model) << ", hidden: " << p.hidden << ", heads: " << p.heads
    << (p.head_dim > 0 ? ", head_dim: " + std::to_string(p.head_dim) : std::string()) << ", ffn_hidden: " << p.ffn_hidden << ", vocab: " << p.vocab << ", seq: " << p.seq << ", mbs: " << p.mbs
    << ", tp: " << p.tp << "}\n";
  o << "  fitted:\n";
  o << "    gemm_peak_gflops: " << num(p.gemm_peak_gflops) << "   # per rank, slope of t = t0 + FLOPs / peak\n";
  o << "    gemm_overhead_us: " << num(p.gemm_overhead_us) << "   # t0, per GEMM\n";
  o << "    memory_gbyte_per_s: " << num(p.memory_gbyte_per_s) << "   # per rank, memory-bound kernels\n";
  o << "    collectives:" << (p.fits.empty() ? " []" : "") << "\n";
  for (const CollectiveFit& f : p.fits)
    o << "      - {op: " << yaml_quote(f.op) << ", ranks: " << f.ranks << ", bandwidth_gbyte_per_s: "
      << num(f.bandwidth_gbyte_per_s) << ", latency_us: " << num(f.latency_us) << "}\n";
  o << "  gemms:" << (p.gemms.empty() ? " []" : "") << "\n";
  for (const GemmTiming& g : p.gemms)
    o << "    - {name: " << yaml_quote(g.name) << ", m: " << g.m << ", n: " << g.n << ", k: " << g.k
      << ", seconds: " << num(g.seconds) << "}\n";
  o << "  kernels:" << (p.kernels.empty() ? " []" : "") << "\n";
  for (const KernelTiming& k : p.kernels)
    o << "    - {name: " << yaml_quote(k.name) << ", bytes: " << num(k.bytes) << ", seconds: " << num(k.seconds)
      << "}\n";
  o << "  collective_timings:" << (p.collectives.empty() ? " []" : "") << "\n";
  for (const CollectiveTiming& c : p.collectives)
    o << "    - {op: " << yaml_quote(c.op) << ", ranks: " << c.ranks << ", bytes: " << num(c.bytes)
      << ", seconds: " << num(c.seconds) << (c.cold ? ", cold: true" : "") << "}\n";
  o << "# written last: a profile without this line was cut short\nend: true\n";
  return o.str();
}

namespace {

// A lockstep timing's optional gradient_exchange_bytes and gradient_exchange_seconds: both
// positive, or neither.
void read_gradient_exchange(detail::MapReader& r, LockstepTiming& l) {
  const bool bytes = r.has("gradient_exchange_bytes"), seconds = r.has("gradient_exchange_seconds");
  r.number("gradient_exchange_bytes", l.gradient_exchange_bytes, bytes || seconds, {0, true, 1e15});
  r.number("gradient_exchange_seconds", l.gradient_exchange_s, bytes || seconds, {0, true, 1e6});
  // ZeRO-1's exchange of the same bytes (optional, with them).
  if (r.has("zero1_exchange_seconds") && !bytes) r.missing("gradient_exchange_bytes", "the bytes ZeRO-1's exchange moved");
  r.number("zero1_exchange_seconds", l.zero1_exchange_s, false, {0, true, 1e6});
}

// device_profile.shape: the model shape the kernels were measured at.
void read_shape(detail::MapReader& r, const std::string& file, Diagnostics& diags, DeviceProfile& p) {
  const detail::Limits count{1, false, 1 << 20};
  const YAML::Node sh = r.child("shape");
  if (!sh || !sh.IsMap()) {
    r.missing("shape", "the model shape the kernels were measured at");
  } else {
    detail::MapReader s(sh, file, "device_profile.shape.", diags);
    s.text("model", p.model, false);
    s.integer("hidden", p.hidden, true, count);
    s.integer("heads", p.heads, true, count);
    s.integer("head_dim", p.head_dim, false, count);
    s.integer("ffn_hidden", p.ffn_hidden, true, count);
    s.integer("vocab", p.vocab, true, count);
    s.integer("seq", p.seq, true, count);
    s.integer("mbs", p.mbs, true, count);
    s.integer("tp", p.tp, true, count);
    s.finish();
  }
}

// device_profile.fitted: the curves fitted to the timings.
void read_fitted(detail::MapReader& r, const std::string& file, Diagnostics& diags, DeviceProfile& p) {
  const detail::Limits positive{0, true, 1e18};
  const detail::Limits nonneg{0, false, 1e18};
  const detail::Limits count{1, false, 1 << 20};
  const YAML::Node fit = r.child("fitted");
  if (!fit || !fit.IsMap()) {
    r.missing("fitted", "the fitted curves");
  } else {
    detail::MapReader f(fit, file, "device_profile.fitted.", diags);
    f.number("gemm_peak_gflops", p.gemm_peak_gflops, true, positive);
    f.number("gemm_overhead_us", p.gemm_overhead_us, true, nonneg);
    f.number("memory_gbyte_per_s", p.memory_gbyte_per_s, true, positive);
    const YAML::Node cs = f.child("collectives");
    if (cs && cs.IsSequence()) {
      for (size_t i = 0; i < cs.size(); ++i) {
        detail::MapReader c(cs[i], file, "device_profile.fitted.collectives[" + std::to_string(i) + "].", diags);
        CollectiveFit cf;
        c.text("op", cf.op, true);
        c.integer("ranks", cf.ranks, true, count);
        c.number("bandwidth_gbyte_per_s", cf.bandwidth_gbyte_per_s, true, positive);
        c.number("latency_us", cf.latency_us, true, nonneg);
        c.finish();
        p.fits.push_back(cf);
      }
    }
    f.finish();
  }
}

// shared_cores: a list of measurements by ranks, each with its lockstep all-reduce by group size;
// one map is a single measurement in the form that had one all-reduce among all its ranks (group
// = ranks) and wrote the hand-off's size beside it.
void read_shared_cores(detail::MapReader& r, const std::string& file, Diagnostics& diags, DeviceProfile& p) {
  const detail::Limits count{1, false, 1 << 20};
  const YAML::Node sh = r.child("shared_cores");
  if (!sh || sh.IsNull()) return;
  const bool one = sh.IsMap();
  if (!one && !sh.IsSequence()) r.error_at(sh, "shared_cores", "expected a list");
  for (size_t i = 0; one || (sh.IsSequence() && i < sh.size()); ++i) {
    const std::string at =
        one ? std::string("device_profile.shared_cores.") : "device_profile.shared_cores[" + std::to_string(i) + "].";
    detail::MapReader s(one ? sh : sh[i], file, at, diags);
    SharedCoresTiming sc;
    s.integer("ranks", sc.ranks, true, count);
    s.number("free_efficiency", sc.free_efficiency, true, {0, true, 1});
    s.number("handoff_seconds", sc.handoff_s, false, {0, false, 1e6});
    s.number("handoff_lockstep_seconds", sc.handoff_lockstep_s, false, {0, false, 1e6});
    s.text("how", sc.how, false);
    s.number("optimizer_bytes", sc.optimizer_bytes, false, {0, false, 1e15});
    if (sc.optimizer_bytes > 0) {  // its two times with it
      s.number("optimizer_seconds", sc.optimizer_s, true, {0, true, 1e6});
      s.number("optimizer_alone_seconds", sc.optimizer_alone_s, true, {0, true, 1e6});
    }
    if (one) {
      LockstepTiming l;
      l.group = sc.ranks;
      double handoff_bytes = 0;
      s.number("allreduce_bytes", l.allreduce_bytes, true, {0, true, 1e15});
      s.number("allreduce_seconds", l.allreduce_s, true, {0, false, 1e6});
      s.number("handoff_bytes", handoff_bytes, false, {0, false, 1e15});
      sc.lockstep.push_back(l);
    } else if (const YAML::Node ls = s.child("lockstep"); ls && !ls.IsNull()) {
      if (!ls.IsSequence()) s.error_at(ls, "lockstep", "expected a list");
      for (size_t j = 0; ls.IsSequence() && j < ls.size(); ++j) {
        detail::MapReader g(ls[j], file, at + "lockstep[" + std::to_string(j) + "].", diags);
        LockstepTiming l;
        g.integer("group", l.group, true, count);
        g.number("allreduce_bytes", l.allreduce_bytes, true, {0, true, 1e15});
        g.number("allreduce_seconds", l.allreduce_s, true, {0, false, 1e6});
        g.number("compute_stretch", l.compute_stretch, false, {1, false, 1e6});
        read_gradient_exchange(g, l);
        g.finish();
        sc.lockstep.push_back(l);
      }
    }
    if (const YAML::Node ex = one ? YAML::Node() : s.child("exchange"); ex && !ex.IsNull()) {
      if (!ex.IsSequence()) s.error_at(ex, "exchange", "expected a list");
      for (size_t j = 0; ex.IsSequence() && j < ex.size(); ++j) {
        detail::MapReader g(ex[j], file, at + "exchange[" + std::to_string(j) + "].", diags);
        SharedExchangeTiming e;
        g.integer("group", e.group, true, {2, false, 1 << 20});
        g.number("bytes", e.bytes, true, {0, true, 1e15});
        g.number("seconds", e.seconds, true, {0, true, 1e6});
        g.finish();
        sc.exchange.push_back(e);
      }
    }
    s.finish();
    std::sort(sc.lockstep.begin(), sc.lockstep.end(),
              [](const LockstepTiming& x, const LockstepTiming& y) { return x.group < y.group; });
    p.shared.push_back(sc);
    if (one) break;
  }
  std::sort(p.shared.begin(), p.shared.end(),
            [](const SharedCoresTiming& x, const SharedCoresTiming& y) { return x.ranks < y.ranks; });
}

}  // namespace

Loaded<DeviceProfile> parse_device_profile_yaml(const std::string& text, const std::string& file) {
  using detail::Limits;
  using detail::MapReader;
  Loaded<DeviceProfile> out;
  // A profile is written whole or not at all (atomically); one cut short lacks its last line.
  std::string tail = text;
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.pop_back();
  if (text.find("device_profile:") != std::string::npos && !tail.ends_with("\nend: true")) {
    out.diagnostics.error(file, 0, 0, "end",
                          "truncated device profile: the closing 'end: true' is missing (measure again)");
    return out;
  }
  YAML::Node root;
  if (!detail::parse_yaml_text(text, file, root, out.diagnostics)) return out;
  if (!root.IsMap() || !root["device_profile"] || !root["device_profile"].IsMap()) {
    out.diagnostics.error(file, detail::position_of(root).line, detail::position_of(root).column, "device_profile",
                          "not a device profile: expected a map 'device_profile:' (written by capplan profile --measure)");
    return out;
  }
  if (!root["end"]) {
    out.diagnostics.error(file, 0, 0, "end",
                          "truncated device profile: the closing 'end: true' is missing (measure again)");
    return out;
  }
  const size_t before = out.diagnostics.items().size();
  DeviceProfile p;
  MapReader r(root["device_profile"], file, "device_profile.", out.diagnostics);
  const Limits positive{0, true, 1e18};
  const Limits nonneg{0, false, 1e18};
  const Limits count{1, false, 1 << 20};
  r.text("device", p.device, true);
  r.text("gpu", p.gpu, true);
  r.text("backend", p.backend, true);
  r.text("created_utc", p.created_utc, false);
  r.text("how", p.how, false);
  r.integer("ranks", p.ranks, true, count);
  r.integer("cores", p.cores, false, count);
  r.integer("threads", p.threads, false, count);
  r.number("peak_rank_bytes", p.peak_rank_bytes, false, nonneg);
  read_shared_cores(r, file, out.diagnostics, p);
  if (const YAML::Node rs = r.child("round_spread"); rs && !rs.IsNull()) {
    MapReader s(rs, file, "device_profile.round_spread.", out.diagnostics);
    s.integer("rounds", p.spread.rounds, true, count);
    s.number("gemms", p.spread.gemms, true, {0, false, 10});
    s.number("kernels", p.spread.kernels, true, {0, false, 10});
    s.number("collectives", p.spread.collectives, true, {0, false, 10});
    s.finish();
  }
  if (const YAML::Node cl = r.child("core_latency"); cl && !cl.IsNull()) {
    MapReader s(cl, file, "device_profile.core_latency.", out.diagnostics);
    s.integer("samples", p.core_latency.samples, true, count);
    for (auto [key, field] : {std::pair{"median_ns", &CoreLatency::median_ns},
                              std::pair{"min_ns", &CoreLatency::min_ns}, std::pair{"max_ns", &CoreLatency::max_ns}})
      s.number(key, p.core_latency.*field, true, {0, true, 1e9});
    s.number("lockstep_before_ns", p.core_latency.lockstep_before_ns, false, {0, true, 1e9});
    s.integer("apart", p.core_latency.apart, false, {0, false, 1 << 20});
    const bool around_lockstep = p.core_latency.lockstep_before_ns > 0;
    s.number("lockstep_after_ns", p.core_latency.lockstep_after_ns, around_lockstep, {0, true, 1e9});
    s.finish();
  }
  if (const YAML::Node ls = r.child("lockstep"); ls && !ls.IsNull()) {
    MapReader s(ls, file, "device_profile.lockstep.", out.diagnostics);
    s.number("allreduce_bytes", p.lockstep.allreduce_bytes, true, {0, true, 1e15});
    s.number("allreduce_seconds", p.lockstep.allreduce_s, true, {0, false, 1e6});
    s.number("exchange_bytes", p.lockstep.exchange_bytes, false, {0, false, 1e15});
    s.number("exchange_seconds", p.lockstep.exchange_s, false, {0, false, 1e6});
    read_gradient_exchange(s, p.lockstep);
    s.number("sp_bytes", p.lockstep.sp_bytes, false, {0, false, 1e15});
    s.number("sp_seconds", p.lockstep.sp_s, p.lockstep.sp_bytes > 0, {0, false, 1e6});
    s.text("how", p.lockstep.how, false);
    s.finish();
  }
  read_shape(r, file, out.diagnostics, p);
  read_fitted(r, file, out.diagnostics, p);
  auto each = [&](const char* key, auto&& read_one) {
    const YAML::Node seq = r.child(key);
    if (!seq || seq.IsNull()) return;
    if (!seq.IsSequence()) {
      r.error_at(seq, key, "expected a list");
      return;
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      MapReader e(seq[i], file, std::string("device_profile.") + key + "[" + std::to_string(i) + "].",
                  out.diagnostics);
      read_one(e);
      e.finish();
    }
  };
  each("gemms", [&](MapReader& e) {
    GemmTiming g;
    e.text("name", g.name, false);
    e.integer64("m", g.m, true, {1, false, 1e12});
    e.integer64("n", g.n, true, {1, false, 1e12});
    e.integer64("k", g.k, true, {1, false, 1e12});
    e.number("seconds", g.seconds, true, positive);
    p.gemms.push_back(g);
  });
  each("kernels", [&](MapReader& e) {
    KernelTiming k;
    e.text("name", k.name, true);
    e.number("bytes", k.bytes, true, nonneg);
    e.number("seconds", k.seconds, true, positive);
    p.kernels.push_back(k);
  });
  each("collective_timings", [&](MapReader& e) {
    CollectiveTiming c;
    e.text("op", c.op, true);
    e.integer("ranks", c.ranks, true, count);
    e.number("bytes", c.bytes, true, positive);
    e.number("seconds", c.seconds, true, positive);
    e.boolean("cold", c.cold, false);
    p.collectives.push_back(c);
  });
  r.finish();
  if (out.diagnostics.has_errors_since(before)) return out;
  out.value = p;
  return out;
}

Loaded<DeviceProfile> load_device_profile(const std::string& path) {
  Loaded<DeviceProfile> out;
  std::string text, error;
  if (!detail::read_text_file(path, text, error)) {
    out.diagnostics.error(path, 0, 0, "", error);
    return out;
  }
  return parse_device_profile_yaml(text, path);
}

std::string device_profile_mismatch(const DeviceProfile& p, const ModelSpec& model, const ClusterSpec& cluster,
                                    const std::string& file) {
  if (p.gpu != cluster.gpu.name)
    return file + ": device profile of another device: measured on " + p.device + " (" + p.gpu +
           "), the cluster's GPU is " + cluster.gpu.name;
  const int head_dim = p.head_dim_or_default();
  if (p.hidden != model.hidden || p.heads != model.heads || head_dim != model.head_dim_or_default() ||
      p.ffn_hidden != model.ffn_hidden_or_default())
    return file + ": device profile of another model shape: measured at hidden " + std::to_string(p.hidden) +
           ", heads " + std::to_string(p.heads) + " of " + std::to_string(head_dim) + ", ffn_hidden " +
           std::to_string(p.ffn_hidden) + "; " + model.name + " has " + std::to_string(model.hidden) + ", " +
           std::to_string(model.heads) + " of " + std::to_string(model.head_dim_or_default()) + ", " +
           std::to_string(model.ffn_hidden_or_default()) + " (measure it: capplan profile --measure)";
  // capplan-train's kernels are those of plain multi-head attention: no profile measures latent
  // attention's projections.
  if (model.mla.enabled())
    return file + ": device profile of another model shape: " + model.name +
           " has multi-head latent attention (mla.kv_lora_rank " + std::to_string(model.mla.kv_lora_rank) +
           "), which capplan-train's kernels do not measure";
  return {};
}

}  // namespace capplan
