// File-system helpers: atomic writes (temporary file + rename) so that a crash or a kill never leaves
// a half-written file under the final name.
#pragma once
#include <functional>
#include <string>

namespace attnmt {

// Writes text to path through path.tmp.<pid> and rename(). Throws Error on I/O failure.
void write_file_atomic(const std::string& path, const std::string& text);

// Calls write(tmp_path) to produce the file, fsyncs it, then renames it over path. On failure the
// temporary file is removed and the previous file at path stays as it was.
void write_atomic_with(const std::string& path, const std::function<void(const std::string& tmp_path)>& write);

// Creates a directory (and parents); throws UsageError naming it when that fails.
void make_dirs(const std::string& dir);

// One writer per directory: an exclusive flock(2) on DIR/.lock, held while this object lives and released by the
// kernel when the process ends however it ends (a killed run never leaves it stuck). The file holds the holder's
// pid and command line, for the refusal message. The descriptor is close-on-exec: child processes do not inherit it.
class DirLock {
 public:
  DirLock() = default;
  // Takes the lock on dir (created when create is set and it is missing). UsageError, one line, when another
  // process holds it: "DIR: in use by pid N (attnmt train ...): ...".
  static DirLock acquire(const std::string& dir, bool create);
  // What the lock file says of its last holder ("pid N (command line)"), or "" without one; it may have ended.
  static std::string holder(const std::string& dir);
  static std::string file(const std::string& dir) { return dir + "/.lock"; }
  DirLock(DirLock&& o) noexcept { *this = std::move(o); }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock() { release(); }
  bool held() const { return fd_ >= 0; }
  // Lets go; a directory this lock created that holds nothing but the lock file is removed again (the writer
  // failed before writing anything).
  void release();

 private:
  int fd_ = -1;
  std::string dir_;
  bool created_ = false;
};

}  // namespace attnmt
