// Crash-safe file replacement, used by every writer in the project: write to a fresh temporary
// name beside the target, fsync, rename over the target, fsync the folder (rename(2) is atomic on
// POSIX file systems; the folder fsync makes the rename durable). A crash at any point leaves
// either the old file or the new one, never a mix; a stray temporary file may remain and is
// ignored by every reader. New files get mode 0666 less the process's umask, applied by the kernel.
#pragma once

#include <cstddef>
#include <string>

namespace capplan {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();  // aborts (removes the temporary file) unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  bool open(const std::string& path, std::string* error);
  bool write(const void* data, size_t bytes, std::string* error);
  bool pwrite_at(const void* data, size_t bytes, size_t offset, std::string* error);
  bool commit(std::string* error);  // fsync, close, rename, fsync folder
  void abort();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// The whole of `contents` through AtomicFile; returns an error message naming the path, empty on
// success.
std::string write_file_atomic(const std::string& path, const std::string& contents);

bool fsync_dir(const std::string& dir, std::string* error);
// mkdir -p; true when the folder exists afterwards.
bool make_dirs(const std::string& dir, std::string* error);
std::string errno_text(int err);

}  // namespace capplan
