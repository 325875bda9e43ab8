#include "planner/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace capplan {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = std::clamp(q, 0.0, 1.0) * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return percentile(v, 0.5);
}

double relative_sd(const std::vector<double>& v) {
  double n = 0, sum = 0;
  for (double x : v)
    if (std::isfinite(x)) n += 1, sum += x;
  if (n < 2 || !(sum > 0)) return 0;
  const double mean = sum / n;
  double sq = 0;
  for (double x : v)
    if (std::isfinite(x)) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / (n - 1)) / mean;
}

}  // namespace capplan
