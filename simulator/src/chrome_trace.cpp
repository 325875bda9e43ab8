// Chrome trace-event JSON of a simulated step (Trace Event Format, "JSON Object Format"): one
// process per simulated GPU (pid = global rank), one thread per stream, complete events ("X")
// with microsecond timestamps, process/thread name metadata and a counter track ("C") of each
// GPU's activation memory. Opens in Perfetto. Written through planner/json.h, so the numbers
// carry a '.' whatever the locale (a Qt application takes the user's, e.g. de_DE's ',').
#include <cmath>
#include <string>

#include "planner/json.h"
#include "simulator/step_simulation.h"

namespace capplan {
namespace {

// `v` rounded to `decimals` digits after the point (nanoseconds for microsecond timestamps).
Json rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return json_number(std::round(v * scale) / scale);
}

Json microseconds(double seconds) { return rounded(seconds * 1e6, 3); }

}  // namespace

std::string chrome_trace_json(const StepSimulation& sim) {
  Json events = Json::array();
  for (size_t st = 0; st < sim.stage_rank.size(); ++st) {
    const int pid = sim.stage_rank[st];
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args",
                       {{"name", "GPU " + std::to_string(pid) + " (stage " + std::to_string(st) + ", node " +
                                     std::to_string(sim.stage_node[st]) + ")"}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", st}}}});
    for (int t = 0; t < kSimStreams; ++t) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", t},
                        {"args", {{"name", to_string(static_cast<SimStream>(t))}}}});
    }
  }
  for (const SimEvent& e : sim.timeline) {
    std::string name = to_string(e.kind);
    if (e.microbatch >= 0) name += " mb" + std::to_string(e.microbatch);
    if (e.bucket >= 0) name += " b" + std::to_string(e.bucket);
    if (e.ring_step >= 0) name += " ring " + std::to_string(e.ring_step);
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"cat", to_string(e.kind)},
                      {"pid", e.rank},
                      {"tid", static_cast<int>(e.stream)},
                      {"ts", microseconds(e.start_s)},
                      {"dur", microseconds(e.end_s - e.start_s)},
                      {"args", {{"stage", e.stage}, {"microbatch", e.microbatch}, {"chunk", e.chunk}}}});
  }
  // Activation memory of each simulated GPU as a counter track ("ph": "C"), in GiB.
  for (size_t st = 0; st < sim.activation_bytes_over_time.size() && st < sim.stage_rank.size(); ++st) {
    for (const auto& [t, bytes] : sim.activation_bytes_over_time[st]) {
      events.push_back({{"ph", "C"},
                        {"name", "activations (GiB)"},
                        {"pid", sim.stage_rank[st]},
                        {"ts", microseconds(t)},
                        {"args", {{"GiB", rounded(bytes / (1024.0 * 1024.0 * 1024.0), 4)}}}});
    }
  }
  const Json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  return json_dump(trace, false) + "\n";
}

}  // namespace capplan
