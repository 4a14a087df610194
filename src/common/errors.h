// Error types: the CLI maps UsageError to exit code 2 and Error to exit code 1.
#pragma once
#include <stdexcept>
#include <string>

namespace attnmt {

// Bad input from the user: CLI arguments, config, corpus, vocabulary, checkpoint. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure at run time that is not the user's input (I/O failure, NaN loss, ...). Exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first line of a message (a child process's stderr, a library's exception text), cut to max_chars with "..."
// where longer: what a one-line error quotes of it.
inline std::string first_line(const std::string& s, size_t max_chars = std::string::npos) {
  std::string l = s.substr(0, s.find('\n'));
  return l.size() > max_chars ? l.substr(0, max_chars) + "..." : l;
}

// Exit codes used by every subcommand.
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

}  // namespace attnmt
