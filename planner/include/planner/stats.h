// Order statistics of measured figures, one definition for the whole project: the runtime's
// device measurement, the launcher's run summaries and the run simulation's percentiles.
#pragma once

#include <vector>

namespace capplan {

// The q-quantile (0 <= q <= 1) of ascending `sorted` by linear interpolation between order
// statistics (Hyndman & Fan 1996, definition 7, the default of R and NumPy); 0 when empty.
double percentile(const std::vector<double>& sorted, double q);

// The median of the finite values of `v` (the mean of the middle two for an even count); NaN when
// there are none.
double median(std::vector<double> v);

// The sample standard deviation of the finite values of `v` over their mean (the coefficient of
// variation); 0 with fewer than two of them or a mean that is not positive.
double relative_sd(const std::vector<double>& v);

}  // namespace capplan
