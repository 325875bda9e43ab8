// Quoting for a POSIX shell, the one way the project does it: the job scripts and Megatron
// arguments of the exports, command.txt and the commands shown to the user. A word of letters,
// digits and @%_+=:,./- stays as it is; any other word is single-quoted ('it'\''s').
#pragma once

#include <string>
#include <vector>

namespace capplan {

std::string shell_quote(const std::string& word);
// The words joined by spaces, each quoted: a line the shell reads back to the same vector.
std::string shell_quote(const std::vector<std::string>& argv);

}  // namespace capplan
