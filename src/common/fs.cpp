#include "common/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/errors.h"

namespace attnmt {

namespace fs = std::filesystem;

void write_atomic_with(const std::string& path, const std::function<void(const std::string&)>& write) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    write(tmp);
    int fd = ::open(tmp.c_str(), O_RDONLY);
    if (fd < 0) throw Error(path + ": cannot reopen temporary file for sync");
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) throw Error(path + ": fsync failed");
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(path + ": cannot rename temporary file into place");
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_atomic_with(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot open for writing");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) throw Error(path + ": write failed (disk full?)");
  });
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw UsageError(dir + ": cannot create directory: " + ec.message());
}

namespace {

// This process's command line, arguments joined by spaces (from /proc/self/cmdline).
std::string own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw)
    if (c == '\0' || c == '\n') c = ' ';
  auto slash = raw.find_last_of('/', raw.find(' '));
  return slash == std::string::npos ? raw : raw.substr(slash + 1);
}

}  // namespace

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    created_ = o.created_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock DirLock::acquire(const std::string& dir, bool create) {
  DirLock lock;
  lock.dir_ = dir;
  if (!fs::is_directory(dir)) {
    if (!create) throw UsageError(dir + ": no such directory");
    make_dirs(dir);
    lock.created_ = true;
  }
  lock.fd_ = ::open(file(dir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) throw UsageError(dir + ": cannot create its lock file " + file(dir) + " (is the directory writable?)");
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock.fd_);
    lock.fd_ = -1;
    std::string who = holder(dir);
    throw UsageError(dir + ": in use by " + (who.empty() ? std::string("another process") : who) +
                     ", which writes this run directory; wait for it to end or stop it (one writer per run directory)");
  }
  std::string text = "pid " + std::to_string(::getpid()) + " (" + own_command_line() + ")\n";
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw Error(dir + ": cannot write its lock file " + file(dir));
  return lock;
}

std::string DirLock::holder(const std::string& dir) {
  int fd = ::open(file(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  ::close(fd);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

void DirLock::release() {
  if (fd_ < 0) return;
  if (created_) {  // nothing written but the lock file: leave no trace of a writer that failed
    std::error_code ec;
    bool only_lock = true;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.path().filename() != ".lock") only_lock = false;
    if (!ec && only_lock) {
      fs::remove(file(dir_), ec);
      fs::remove(dir_, ec);
    }
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace attnmt
