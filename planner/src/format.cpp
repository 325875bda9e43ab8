// Locale-independent number formatting (format.h).
#include "planner/format.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace capplan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string chars(double v, std::chars_format f, int precision) {
  char buf[512];  // every digit of the largest double in fixed form (309) and its decimals
  auto r = std::to_chars(buf, buf + sizeof buf, v, f, precision);
  if (r.ec != std::errc()) r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 17);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string fmt_fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  return chars(v, std::chars_format::fixed, decimals);
}

std::string fmt_general(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // printf's %g writes the exponent with at least two digits ("1e-09"); to_chars writes "1e-09" too.
  return chars(v, std::chars_format::general, digits);
}

std::string fmt_si(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 1e12) return fmt_fixed(v / 1e12, 2) + "T";
  if (a >= 1e9) return fmt_fixed(v / 1e9, 2) + "B";
  if (a >= 1e6) return fmt_fixed(v / 1e6, 2) + "M";
  if (a >= 1e4) return fmt_fixed(v / 1e3, 1) + "K";
  return fmt_general(v, 4);
}

std::string fmt_money(double v) {
  if (!std::isfinite(v)) return "unknown";
  const long long whole = std::llround(v);
  const std::string digits = std::to_string(std::llabs(whole));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return std::string(whole < 0 ? "-$" : "$") + out;
}

std::string fmt_gib(double bytes) { return fmt_fixed(bytes / kGiB, 1); }

std::string fmt_mib(double bytes) { return std::isfinite(bytes) ? fmt_fixed(bytes / kMiB, 1) + " MiB" : "-"; }

std::string fmt_bytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  return std::fabs(bytes) >= kGiB ? fmt_fixed(bytes / kGiB, 1) + " GiB" : fmt_mib(bytes);
}

std::string fmt_duration(double s) {
  if (!std::isfinite(s)) return "-";
  if (s != 0 && std::fabs(s) < 1e-3) return fmt_fixed(s * 1e6, 1) + " us";
  if (std::fabs(s) < 1) return fmt_fixed(s * 1e3, 2) + " ms";
  return fmt_fixed(s, 3) + " s";
}

std::string fmt_count(double n) {
  if (!std::isfinite(n)) return "infinitely many";
  return n < 1e6 ? fmt_fixed(n, 0) : fmt_general(n, 3);
}

}  // namespace capplan
