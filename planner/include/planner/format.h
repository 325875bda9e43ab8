// Numbers as people read them in tables, reports and messages, the same in every locale: written
// with std::to_chars, never printf's %f, which writes a decimal comma under a comma-decimal locale
// (and a Qt application adopts the user's locale). The one copy for the CLI, the reports, the run
// records and the messages of every library.
#pragma once

#include <string>

namespace capplan {

std::string fmt_fixed(double v, int decimals);  // "12.35" (printf %.Nf); "-" when not finite
std::string fmt_general(double v, int digits);  // printf %.Ng: "0.5", "1.23e+09"; "nan", "inf", "-inf"
std::string fmt_si(double v);                   // "174.60B", "1.20M", "12.3K", "950"; "-" when not finite
std::string fmt_money(double v);                // "$1,234,567", "-$12"; "unknown" when not finite
std::string fmt_gib(double bytes);              // "28.1" (GiB, for a column that names its unit)
std::string fmt_mib(double bytes);              // "512.0 MiB"
std::string fmt_bytes(double bytes);            // "512.0 MiB" below 1 GiB, "28.1 GiB" from 1 GiB on
std::string fmt_duration(double seconds);       // "850.0 us", "12.35 ms", "1.234 s"; "-" when not finite
std::string fmt_count(double n);                // "1234567" below 1e6, "1.23e+07" from 1e6; "infinitely many"

}  // namespace capplan
