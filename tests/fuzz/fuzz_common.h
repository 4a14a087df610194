// Shared helpers for the libFuzzer targets (built by scripts/fuzz.sh with clang, not by CMake).
// Readers are fuzzed through real files (in /dev/shm when it exists) so that the code under test is exactly
// what the CLI runs. Only attnmt::UsageError is an accepted outcome for bad input; any other exception,
// crash, sanitizer report or broken invariant is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/errors.h"

namespace attnmt::fuzz {

inline std::string scratch_file(const char* name) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return dir + "/attnmt_fuzz_" + std::to_string(getpid()) + "_" + name;
}

inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// Aborts (a finding) with a message when an invariant does not hold.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace attnmt::fuzz
