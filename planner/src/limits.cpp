// The one reader of user input files (limits.h): stat before open, open without blocking,
// fstat again on the open descriptor (the path may have changed), read at most the limit.
#include "planner/limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace capplan {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

bool check_stat(const struct stat& st, int64_t max_bytes, std::string& error) {
  if (!S_ISREG(st.st_mode)) {
    error = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
    return false;
  }
  if (max_bytes >= 0 && int64_t(st.st_size) > max_bytes) {
    error = "file too large: " + std::to_string(int64_t(st.st_size)) +
            " bytes, over the limit of " + describe_bytes(max_bytes) + " for an input file";
    return false;
  }
  return true;
}

}  // namespace

std::string describe_bytes(int64_t bytes) {
  if (bytes > 0 && bytes % (int64_t(1) << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes > 0 && bytes % (int64_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

bool check_input_file(const std::string& path, std::string& error) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    const int e = path.empty() ? ENOENT : errno;
    if (e == ENOENT || e == ENOTDIR) {
      struct stat lst {};
      error = !path.empty() && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)
                  ? "a dangling symlink"
                  : "no such file";
    } else {
      error = std::string("cannot open file: ") + std::strerror(e);
    }
    return false;
  }
  return check_stat(st, -1, error);
}

bool read_input_file(const std::string& path, std::string& out, std::string& error,
                     int64_t max_bytes) {
  if (!check_input_file(path, error)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    error = std::string("cannot open file: ") + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !check_stat(st, max_bytes, error)) {
    if (error.empty()) error = std::string("cannot read file: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  std::string text;
  text.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::string("cannot read file: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    if (max_bytes >= 0 && int64_t(text.size()) + n > max_bytes) {  // grew while read
      error = "file too large: over the limit of " + describe_bytes(max_bytes) +
              " for an input file";
      ::close(fd);
      return false;
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  out = std::move(text);
  return true;
}

}  // namespace capplan
