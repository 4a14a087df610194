#include "common/fs.h"

#include <fcntl.h>
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

}  // namespace attnmt
