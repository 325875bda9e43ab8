// Temporary file + fsync + rename + folder fsync (see planner/atomic_file.h).
#include "planner/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace capplan {

std::string errno_text(int err) { return std::strerror(err); }

AtomicFile::~AtomicFile() { abort(); }

bool AtomicFile::open(const std::string& path, std::string* error) {
  abort();
  path_ = path;
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  // A fresh name per open (threads of one process may write files at once), created exclusively
  // with mode 0666 so that the kernel applies the umask: reading the umask means setting it,
  // process-wide, which a multi-threaded GUI must not do.
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name(".");
    name += target.filename().string();
    name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    tmp_ = (dir / name).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) {
    *error = path + ": cannot create a temporary file: " + errno_text(errno);
    tmp_.clear();
    return false;
  }
  return true;
}

bool AtomicFile::write(const void* data, size_t bytes, std::string* error) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = tmp_ + ": write failed: " + errno_text(errno);
      return false;
    }
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

bool AtomicFile::pwrite_at(const void* data, size_t bytes, size_t offset, std::string* error) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd_, p, bytes, off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = tmp_ + ": write failed: " + errno_text(errno);
      return false;
    }
    p += n;
    bytes -= size_t(n);
    offset += size_t(n);
  }
  return true;
}

bool AtomicFile::commit(std::string* error) {
  if (fd_ < 0) {
    *error = path_ + ": not open";
    return false;
  }
  if (::fsync(fd_) != 0) {
    *error = tmp_ + ": fsync failed: " + errno_text(errno);
    abort();
    return false;
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    *error = path_ + ": rename from " + tmp_ + " failed: " + errno_text(errno);
    ::unlink(tmp_.c_str());
    return false;
  }
  tmp_.clear();
  std::string dir = std::filesystem::path(path_).parent_path().string();
  return fsync_dir(dir.empty() ? "." : dir, error);
}

void AtomicFile::abort() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
}

std::string write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile file;
  std::string error;
  if (!file.open(path, &error) || !file.write(contents.data(), contents.size(), &error) || !file.commit(&error)) {
    return error;
  }
  return {};
}

bool fsync_dir(const std::string& dir, std::string* error) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *error = dir + ": cannot open folder: " + errno_text(errno);
    return false;
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) {  // some file systems do not support fsync on folders
    *error = dir + ": fsync of folder failed: " + errno_text(err);
    return false;
  }
  return true;
}

bool make_dirs(const std::string& dir, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (std::filesystem::is_directory(dir)) return true;
  *error = dir + ": cannot create folder: " + (ec ? ec.message() : std::string("not a folder"));
  return false;
}

}  // namespace capplan
