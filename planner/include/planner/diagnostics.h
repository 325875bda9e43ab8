// Diagnostics for user input: every problem found in one pass, with file, 1-based line:column,
// the key path (e.g. "model.heads"), what was expected and a hint. Library code never exits or
// throws over user input; it returns these. The CLI prints them as `file:line:col: error: ...`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace capplan {

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  std::string file;     // path as given by the user, or "<preset:NAME>" / "<command line>"
  int line = 0;         // 1-based; 0 = unknown
  int column = 0;       // 1-based; 0 = unknown
  std::string path;     // key path such as "model.heads"; empty when not about one key
  std::string message;  // what is wrong, including expected vs found
  std::string hint;     // optional: "did you mean 'hidden'?"

  // "file:line:col: error: model.heads: must be > 0, found -4 (hint)"
  std::string to_string() const;
};

class Diagnostics {
 public:
  void add(Diagnostic d) { items_.push_back(std::move(d)); }
  void error(std::string file, int line, int column, std::string path, std::string message,
             std::string hint = {});
  void warning(std::string file, int line, int column, std::string path, std::string message,
               std::string hint = {});
  void append(const Diagnostics& other);

  bool has_errors() const;
  // Whether an error was added after the first `from` diagnostics (a reader's own, where it
  // appends to a list that may hold others).
  bool has_errors_since(size_t from) const;
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  // All diagnostics, one per line, in to_string() form.
  std::string to_string() const;

 private:
  std::vector<Diagnostic> items_;
};

// A value loaded from user input, or the diagnostics that explain why it could not be.
// `value` may be set while warnings are present; it is never set when an error is present.
template <class T>
struct Loaded {
  std::optional<T> value;
  Diagnostics diagnostics;
  bool ok() const { return value.has_value() && !diagnostics.has_errors(); }
};

// Closest candidate by edit distance for a "did you mean" hint; empty when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace capplan
