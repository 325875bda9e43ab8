// Crash-safe file replacement: write to `<path>.tmp.<pid>`, fsync, rename over `path`, fsync the
// folder (rename(2) is atomic on POSIX file systems; the folder fsync makes the rename durable).
// A crash at any point leaves either the old file or the new one, never a mix; a stray temp file
// may remain and is ignored by every reader.
#pragma once

#include <cstddef>
#include <string>

namespace capplan::rt {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();  // aborts (removes the temp file) unless committed
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

bool fsync_dir(const std::string& dir, std::string* error);
// mkdir -p; true when the folder exists afterwards.
bool make_dirs(const std::string& dir, std::string* error);
std::string errno_text(int err);

}  // namespace capplan::rt
