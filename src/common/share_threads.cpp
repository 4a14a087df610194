#include "common/share_threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/runtime.h"

namespace attnmt {

namespace {
// Helper threads for the shares, each pinned, while it works, to a core other than the
// caller's. Left to itself the scheduler often woke a helper on the caller's own core (OpenBLAS's idle thread
// spins on the other one, so that core looks busy): the two halves then shared one core and a product took
// longer than the BLAS's. Idle helpers sleep on a condition variable.
class ShareThreads {
 public:
  // Runs share(0) on the caller and share(1) .. share(n - 1) on helpers; returns when all are done.
  static void run(int64_t n, const std::function<void(int64_t)>& share) {
    if (n <= 1) return share(0);
    static ShareThreads pool;
    pool.run_shares(n, share);
  }

 private:
  ~ShareThreads() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run_shares(int64_t n, const std::function<void(int64_t)>& share) {
    std::lock_guard<std::mutex> one_at_a_time(busy_);  // callers on several threads take turns
    std::unique_lock<std::mutex> lk(mu_);
    while (static_cast<int64_t>(threads_.size()) < n - 1) {
      const int64_t id = static_cast<int64_t>(threads_.size()) + 1;
      threads_.emplace_back([this, id] { loop(id); });
      pinned_.push_back(-1);
    }
    pin_away_from_caller(n);
    share_ = &share;
    shares_ = n;
    pending_ = n - 1;
    ++generation_;
    lk.unlock();
    wake_.notify_all();
    share(0);
    lk.lock();
    done_.wait(lk, [&] { return pending_ == 0; });
    share_ = nullptr;
  }

  // Helper i (1-based) onto the i-th allowed core that is not the caller's, when there is one.
  void pin_away_from_caller(int64_t n) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    const int here = sched_getcpu();
    std::vector<int> others;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed) && c != here) others.push_back(c);
    if (others.empty()) return;
    for (int64_t i = 1; i < n; ++i) {
      const int cpu = others[static_cast<size_t>(i - 1) % others.size()];
      if (pinned_[static_cast<size_t>(i - 1)] == cpu) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (pthread_setaffinity_np(threads_[static_cast<size_t>(i - 1)].native_handle(), sizeof one, &one) == 0)
        pinned_[static_cast<size_t>(i - 1)] = cpu;
    }
  }

  void loop(int64_t id) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [&] { return stop_ || (generation_ != seen && id < shares_); });
      if (stop_) return;
      seen = generation_;
      const std::function<void(int64_t)>* share = share_;
      lk.unlock();
      (*share)(id);
      lk.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_, mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  std::vector<int> pinned_;  // the core each helper is pinned to, -1 before the first pin
  const std::function<void(int64_t)>* share_ = nullptr;
  int64_t shares_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};
}  // namespace

void run_shares(int64_t n, const std::function<void(int64_t)>& share) { ShareThreads::run(n, share); }

void share_rows(int64_t n, int64_t min_rows, const std::function<void(int64_t, int64_t)>& rows) {
  const int64_t shares = std::max<int64_t>(1, std::min<int64_t>(blas_threads(), n / std::max<int64_t>(1, min_rows)));
  run_shares(shares, [&](int64_t s) { rows(n * s / shares, n * (s + 1) / shares); });
}

}  // namespace attnmt
