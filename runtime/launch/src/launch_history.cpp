// Earlier runs: the run folders under a runs folder, read back from their record, their plan and
// their checkpoints, for listing and resuming after a restart. Reads only; never throws on a
// corrupt file.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.h"
#include "launch/launch.h"
#include "planner/json.h"

namespace capplan::rt {
namespace {

// RUNDIR/run.json as JSON; a discarded value when it is missing or corrupt (never throws).
Json read_record(const std::string& run_dir) {
  std::ifstream in(run_dir + "/run.json");
  if (!in) return Json(Json::value_t::discarded);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, false);
}

}  // namespace

std::vector<RunListing> list_runs(const std::string& runs_dir) {
  namespace fs = std::filesystem;
  std::vector<RunListing> out;
  std::error_code ec;
  if (!fs::is_directory(runs_dir, ec)) return out;
  for (fs::directory_iterator it(runs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string dir = it->path().string();
    const bool record = fs::is_regular_file(dir + "/run.json", ec);
    const bool plan = fs::is_regular_file(dir + "/plan.yaml", ec);
    if (!record && !plan) continue;
    RunListing r;
    r.run_dir = dir;
    r.name = it->path().filename().string();
    r.status = "unknown";
    if (record) {
      const Json j = read_record(dir);
      if (j.is_object()) {
        r.status = json_string(j, "status", "unknown");
        r.reason = json_string(j, "reason");
        r.started_utc = json_string(j, "started_utc");
        r.steps = int(json_double(j, "steps", 0));
        if (const auto run = j.find("run"); run != j.end() && run->is_object())
          if (const auto m = run->find("model"); m != run->end() && m->is_object())
            r.model = json_string(*m, "name");
      }
    }
    if (plan) {
      Loaded<Plan> p = load_plan(dir + "/plan.yaml");
      if (p.ok()) r.plan = *p.value;
      if (r.model.empty() && r.plan) r.model = r.plan->scenario.model.name;
    }
    const LatestGood latest = checkpoint_find_latest_good(dir + "/checkpoints", {});
    if (latest.manifest) r.checkpoint_step = latest.manifest->step;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const RunListing& a, const RunListing& b) {
    return a.name != b.name ? a.name > b.name : a.started_utc > b.started_utc;
  });
  return out;
}

RunComparison read_run_comparison(const std::string& run_dir) {
  RunComparison out;
  const Json j = read_record(run_dir);
  if (!j.is_object()) return out;
  auto rows = [&](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_array() ? *it : Json::array();
  };
  for (const Json& r : rows("comparison")) {
    if (!r.is_object()) continue;
    out.terms.push_back({json_string(r, "term"), json_double(r, "predicted_s", kUnknown),
                         json_double(r, "simulated_s", kUnknown), json_double(r, "measured_s", kUnknown),
                         json_double(r, "predicted_p10_s", kUnknown), json_double(r, "predicted_p90_s", kUnknown)});
  }
  for (const Json& r : rows("memory_comparison")) {
    if (!r.is_object()) continue;
    out.memory.push_back(
        {json_string(r, "kind"), json_double(r, "predicted_bytes", kUnknown), json_double(r, "measured_bytes", kUnknown)});
  }
  return out;
}

}  // namespace capplan::rt
