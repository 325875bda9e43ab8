// POSIX shell quoting (see planner/shell_quote.h).
#include "planner/shell_quote.h"

#include <cctype>
#include <cstring>

namespace capplan {

std::string shell_quote(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("@%_+=:,./-", c)))) plain = false;
  }
  if (plain) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) out += ' ';
    out += shell_quote(argv[i]);
  }
  return out;
}

}  // namespace capplan
