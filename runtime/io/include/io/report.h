// `capplan-train report FILE`: reads a metrics JSON-lines file (metrics.h) and prints a summary
// (steps, loss first/last, tokens/s, MFU, phase shares) and bottleneck findings in the spirit of
// SageMaker Debugger's built-in rules. Each finding names its rule, the evidence in numbers, and
// advice. It reads the file only; it never changes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/diagnostics.h"

namespace capplan::rt {

struct Finding {
  std::string rule;      // "DataLoadingDominates", "LowCPUUtilization", "CommunicationOutweighsCompute",
                         // "LossNotDecreasing", "NonFiniteLoss", "RunFailed"
  std::string severity;  // "warning" or "error"
  std::string evidence;  // the numbers that triggered it
  std::string advice;
};

struct RunSummary {
  std::string model;
  int world = 0, dp = 0;
  int runs = 0;                  // start records: 1 + the number of resumes appended to the file
  int64_t steps = 0;             // step records read
  int64_t first_step = 0, last_step = 0;
  double loss_first = 0, loss_last = 0, loss_min = 0;
  double mean_tokens_per_s = 0;  // mean over steps after the first (warm-up excluded when > 1)
  double mean_step_time_s = 0;
  double mean_mfu = 0;           // NaN when unknown
  std::string peak_flops_source;
  // Share of the summed step time spent in each phase (0..1); "other" is the rest.
  double share_forward = 0, share_backward = 0, share_optimizer = 0, share_dp_comm = 0,
         share_data = 0, share_other = 0;
  // Share of the step time inside the backend's GEMMs (part of forward and backward); NaN when
  // the records do not carry gemm_s.
  double share_gemm = 0;
  // Share of the step time the threads waited for each other at the end of the batch split's
  // parts (mean over threads); NaN when the run did not split the batch over threads.
  double share_split_wait = 0;
  int64_t system_samples = 0;
  double mean_cpu_util = 0;      // NaN when no system samples
  int64_t peak_rss_bytes = 0;
  std::string status;            // from the summary record; "missing" when there is none
  std::string reason;
};

struct Report {
  RunSummary summary;
  std::vector<Finding> findings;
};

// Thresholds of the rules (our defaults; the rules themselves are modelled on SageMaker
// Debugger's, see report.cpp).
struct ReportRules {
  double data_share_max = 0.25;         // data loading > 25% of step time
  double cpu_util_min = 0.5;            // mean CPU utilisation < 50% of the expected cores
  double comm_over_compute_max = 1.0;   // dp_comm_s > 1.0 x (forward_s + backward_s)
  double loss_decrease_min = 0.01;      // last-window mean loss must be < (1 - 1%) of the first
  int64_t loss_window = 5;              // steps averaged at each end for the loss rule
  int64_t min_steps_for_loss_rule = 10;
};

// A file may hold several runs (a run resumed with the metrics file opened for append): a start
// record with resumed_from_step = k drops the steps after k recorded before it, and only the
// summary after the last start counts. Parses the file; lines that are not JSON objects are diagnostics with their line number (the
// report still uses the good lines). An unreadable file is an error with no value.
Loaded<Report> report_analyze_file(const std::string& path, const ReportRules& rules = {});
Report report_analyze_lines(const std::vector<std::string>& lines, const ReportRules& rules,
                            Diagnostics* diags, const std::string& file = "<input>");

std::string report_to_text(const Report& report);
std::string report_to_json(const Report& report);

// `capplan-train report FILE [--json]`; argv[0] is the command name ("report").
// Returns 0, or 2 on bad input (file:line: error: ... on stderr).
int report_main(int argc, char** argv);

}  // namespace capplan::rt
