// Expectation: the number formats of tables, reports and messages (planner/format.h) give the
// documented text for ordinary, edge and non-finite values, and the same text under a
// comma-decimal locale as under "C" (printf's %f would write "1,5" there); the order statistics
// of measured figures (planner/stats.h) are the textbook ones.
#include "planner/format.h"
#include "planner/stats.h"

#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "support/test_files.h"

namespace capplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void expect_documented_text() {
  EXPECT_EQ(fmt_fixed(12.345, 2), "12.35");
  EXPECT_EQ(fmt_fixed(-0.5, 0), "-0");
  EXPECT_EQ(fmt_fixed(1.5, 1), "1.5");
  EXPECT_EQ(fmt_fixed(kNaN, 2), "-");
  EXPECT_EQ(fmt_fixed(1e300, 2).size(), 304u);  // every digit, no overflow of a fixed buffer
  EXPECT_EQ(fmt_general(0.5, 3), "0.5");
  EXPECT_EQ(fmt_general(1.234e9, 3), "1.23e+09");
  EXPECT_EQ(fmt_general(1e-9, 3), "1e-09");
  EXPECT_EQ(fmt_general(-kInf, 3), "-inf");
  EXPECT_EQ(fmt_general(kNaN, 3), "nan");
  EXPECT_EQ(fmt_si(174.6e9), "174.60B");
  EXPECT_EQ(fmt_si(1.2e6), "1.20M");
  EXPECT_EQ(fmt_si(12345), "12.3K");
  EXPECT_EQ(fmt_si(950), "950");
  EXPECT_EQ(fmt_si(2.5e12), "2.50T");
  EXPECT_EQ(fmt_money(1234567.4), "$1,234,567");
  EXPECT_EQ(fmt_money(-12), "-$12");
  EXPECT_EQ(fmt_money(999), "$999");
  EXPECT_EQ(fmt_money(kInf), "unknown");
  EXPECT_EQ(fmt_gib(28.1 * 1024 * 1024 * 1024), "28.1");
  EXPECT_EQ(fmt_mib(512.0 * 1024 * 1024), "512.0 MiB");
  EXPECT_EQ(fmt_bytes(512.0 * 1024 * 1024), "512.0 MiB");
  EXPECT_EQ(fmt_bytes(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  EXPECT_EQ(fmt_duration(850e-6), "850.0 us");
  EXPECT_EQ(fmt_duration(0.012345), "12.35 ms");
  EXPECT_EQ(fmt_duration(0), "0.00 ms");
  EXPECT_EQ(fmt_duration(1.2344), "1.234 s");
  EXPECT_EQ(fmt_duration(kNaN), "-");
  EXPECT_EQ(fmt_count(999999), "999999");
  EXPECT_EQ(fmt_count(12345678), "1.23e+07");
  EXPECT_EQ(fmt_count(kInf), "infinitely many");
}

TEST(Format, DocumentedTextForOrdinaryEdgeAndNonFiniteValues) { expect_documented_text(); }

TEST(Format, SameTextUnderACommaDecimalLocale) {
  // de_DE.UTF-8 compiled by localedef (package locales) into a scratch folder LOCPATH points at.
  const std::string dir = test::scratch_dir("locale").string();
  const std::string cmd = "localedef -i de_DE -f UTF-8 '" + dir + "/de_DE.UTF-8' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) == 0) ::setenv("LOCPATH", dir.c_str(), 1);
  ASSERT_NE(std::setlocale(LC_ALL, "de_DE.UTF-8"), nullptr) << "no de_DE.UTF-8 locale: localedef failed";
  char probe[16];
  std::snprintf(probe, sizeof probe, "%.1f", 1.5);
  EXPECT_STREQ(probe, "1,5");  // the locale is in force
  expect_documented_text();
  std::setlocale(LC_ALL, "C");
  ::unsetenv("LOCPATH");
}

}  // namespace
}  // namespace capplan

// One median and one percentile for the project (planner/stats.h).
TEST(Stats, MedianOfTheFiniteValuesAndInterpolatedPercentiles) {
  EXPECT_DOUBLE_EQ(capplan::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(capplan::median({4, 1, 3, 2}), 2.5);  // the middle two's mean
  EXPECT_DOUBLE_EQ(capplan::median({5, NAN, 1, INFINITY}), 3);
  EXPECT_TRUE(std::isnan(capplan::median({})));
  EXPECT_TRUE(std::isnan(capplan::median({NAN})));
  const std::vector<double> sorted = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(capplan::percentile(sorted, 0.5), 30);
  EXPECT_DOUBLE_EQ(capplan::percentile(sorted, 0.1), 14);  // 0.4 of the way from 10 to 20
  EXPECT_DOUBLE_EQ(capplan::percentile(sorted, 1.0), 50);
  EXPECT_DOUBLE_EQ(capplan::percentile({}, 0.5), 0);
}
