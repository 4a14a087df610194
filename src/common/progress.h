// Progress a user can plan by: a line on stderr with the share done and the time left, for work that runs
// longer than a few seconds, shown only when stderr is a terminal (logs and pipes stay clean).
#pragma once
#include <cstdint>
#include <string>

namespace attnmt {

// Seconds on a monotonic clock, for intervals.
double monotonic_s();

// "42 s", "3:07", "1:02:09".
std::string format_duration(double seconds);

// "translating: 37% (370/1000), 0:12 left" — the time left from the rate so far.
std::string progress_text(const std::string& what, int64_t done, int64_t total, double elapsed_s);

class ProgressLine {
 public:
  // Shows nothing before delay_s, nor when stderr is not a terminal (force: always, for tests).
  ProgressLine(std::string what, int64_t total, double delay_s = 3.0, bool force = false);
  ~ProgressLine();  // clears the line it drew
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void update(int64_t done);

 private:
  std::string what_;
  int64_t total_;
  double delay_s_, start_s_, last_s_ = 0;
  bool enabled_, drawn_ = false;
};

}  // namespace attnmt
