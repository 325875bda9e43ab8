// Chrome trace-event JSON of a simulated step (Trace Event Format, "JSON Object Format"): one
// process per simulated GPU (pid = global rank), one thread per stream, complete events ("X")
// with microsecond timestamps, process/thread name metadata and a counter track ("C") of each
// GPU's activation memory. Opens in Perfetto.
#include <charconv>
#include <cstdio>
#include <string>

#include "simulator/step_simulation.h"

namespace capplan {
namespace {

// Fixed-point text with `decimals` digits, always with a '.' (std::to_chars ignores the C
// locale, which a Qt application sets from the user's: "%.3f" would write "1,500" in de_DE).
void append_fixed(std::string& s, double v, int decimals) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  s.append(buf, r.ec == std::errc() ? r.ptr : buf);
}

void append_us(std::string& s, double seconds) { append_fixed(s, seconds * 1e6, 3); }

}  // namespace

std::string chrome_trace_json(const StepSimulation& sim) {
  std::string s;
  s.reserve(sim.timeline.size() * 140 + 1024);
  s += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) s += ",\n";
    first = false;
  };
  for (size_t st = 0; st < sim.stage_rank.size(); ++st) {
    const int pid = sim.stage_rank[st];
    sep();
    s += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
         ",\"args\":{\"name\":\"GPU " + std::to_string(pid) + " (stage " + std::to_string(st) +
         ", node " + std::to_string(sim.stage_node[st]) + ")\"}}";
    sep();
    s += "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(pid) +
         ",\"args\":{\"sort_index\":" + std::to_string(st) + "}}";
    for (int t = 0; t < kSimStreams; ++t) {
      sep();
      s += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":" + std::to_string(t) + ",\"args\":{\"name\":\"" +
           to_string(static_cast<SimStream>(t)) + "\"}}";
    }
  }
  for (const SimEvent& e : sim.timeline) {
    sep();
    std::string name = to_string(e.kind);
    if (e.microbatch >= 0) name += " mb" + std::to_string(e.microbatch);
    if (e.bucket >= 0) name += " b" + std::to_string(e.bucket);
    s += "{\"ph\":\"X\",\"name\":\"" + name + "\",\"cat\":\"" + to_string(e.kind) +
         "\",\"pid\":" + std::to_string(e.rank) + ",\"tid\":" +
         std::to_string(static_cast<int>(e.stream)) + ",\"ts\":";
    append_us(s, e.start_s);
    s += ",\"dur\":";
    append_us(s, e.end_s - e.start_s);
    s += ",\"args\":{\"stage\":" + std::to_string(e.stage) + ",\"microbatch\":" +
         std::to_string(e.microbatch) + ",\"chunk\":" + std::to_string(e.chunk) + "}}";
  }
  // Activation memory of each simulated GPU as a counter track ("ph": "C"), in GiB.
  for (size_t st = 0; st < sim.activation_bytes_over_time.size() && st < sim.stage_rank.size(); ++st) {
    for (const auto& [t, bytes] : sim.activation_bytes_over_time[st]) {
      sep();
      s += "{\"ph\":\"C\",\"name\":\"activations (GiB)\",\"pid\":" + std::to_string(sim.stage_rank[st]) +
           ",\"ts\":";
      append_us(s, t);
      s += ",\"args\":{\"GiB\":";
      append_fixed(s, bytes / (1024.0 * 1024.0 * 1024.0), 4);
      s += "}}";
    }
  }
  s += "\n]}\n";
  return s;
}

}  // namespace capplan
