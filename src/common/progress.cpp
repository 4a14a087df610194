#include "common/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace attnmt {

double monotonic_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%lld s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string progress_text(const std::string& what, int64_t done, int64_t total, double elapsed_s) {
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s: %d%% (%lld/%lld)", what.c_str(), static_cast<int>(std::floor(100 * share)),
                static_cast<long long>(done), static_cast<long long>(total));
  std::string out = buf;
  if (done > 0 && done < total) out += ", " + format_duration(elapsed_s / share - elapsed_s) + " left";
  return out;
}

ProgressLine::ProgressLine(std::string what, int64_t total, double delay_s, bool force)
    : what_(std::move(what)), total_(total), delay_s_(delay_s), start_s_(monotonic_s()), enabled_(force || ::isatty(STDERR_FILENO) != 0) {}

ProgressLine::~ProgressLine() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
}

void ProgressLine::update(int64_t done) {
  if (!enabled_) return;
  const double now = monotonic_s();
  if (now - start_s_ < delay_s_ || now - last_s_ < 0.25) return;
  last_s_ = now;
  std::fprintf(stderr, "\r\033[K%s", progress_text(what_, done, total_, now - start_s_).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace attnmt
