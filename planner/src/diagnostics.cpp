// Diagnostics formatting and the "did you mean" matcher.
#include "planner/diagnostics.h"

#include <algorithm>
#include <cstddef>
#include <cctype>
#include <sstream>

namespace capplan {

std::string Diagnostic::to_string() const {
  std::ostringstream os;
  os << (file.empty() ? "<input>" : file);
  if (line > 0) {
    os << ':' << line;
    if (column > 0) os << ':' << column;
  }
  os << ": ";
  switch (severity) {
    case Severity::Error: os << "error: "; break;
    case Severity::Warning: os << "warning: "; break;
    case Severity::Note: os << "note: "; break;
  }
  if (!path.empty()) os << path << ": ";
  os << message;
  if (!hint.empty()) os << " (" << hint << ")";
  return os.str();
}

void Diagnostics::error(std::string file, int line, int column, std::string path,
                        std::string message, std::string hint) {
  items_.push_back({Severity::Error, std::move(file), line, column, std::move(path),
                    std::move(message), std::move(hint)});
}

void Diagnostics::warning(std::string file, int line, int column, std::string path,
                          std::string message, std::string hint) {
  items_.push_back({Severity::Warning, std::move(file), line, column, std::move(path),
                    std::move(message), std::move(hint)});
}

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

bool Diagnostics::has_errors() const { return has_errors_since(0); }

bool Diagnostics::has_errors_since(size_t from) const {
  if (from >= items_.size()) return false;
  return std::any_of(items_.begin() + std::ptrdiff_t(from), items_.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::Error; });
}

std::string Diagnostics::to_string() const {
  std::string out;
  for (const auto& d : items_) {
    out += d.to_string();
    out += '\n';
  }
  return out;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: skip the quadratic count when that
    // alone is over the limit (a 10 MB "key" is not compared letter by letter).
    const size_t gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (gap > limit) continue;
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Close enough: at most a third of the word's letters differ (and at least one may).
  return best_d <= limit ? best : std::string{};
}

}  // namespace capplan
