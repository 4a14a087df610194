#include "kernels/share_threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/runtime.h"

namespace attnmt {

namespace {
// Helper threads for the shares, each pinned, while it works, to a core other than the caller's. Left to itself
// the scheduler often woke a helper on the caller's own core: the two halves then shared one core.
//
// Between two calls a helper first spins (kSpin), then sleeps on a condition variable; the caller waits for the
// helpers the same way. A training or decoder step makes hundreds of calls microseconds to a millisecond apart,
// and waking a sleeping thread costs more than such a gap on a virtual machine, whose idle virtual CPU has halted
// and must be scheduled again. OpenBLAS's own threads spin between products for 2^28 cycles (about 0.1 s);
// the spin here stops after a millisecond, so that an idle process gives its cores back at once.
constexpr std::chrono::microseconds kSpin{1000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or the budget is spent; whether done() came true.
template <typename Done>
bool spin_until(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

class ShareThreads {
 public:
  // Runs share(0) on the caller and share(1) .. share(n - 1) on helpers; returns when all are done.
  static void run(int64_t n, const std::function<void(int64_t)>& share) {
    if (n <= 1) return share(0);
    static ShareThreads pool;
    pool.run_shares(n, share);
  }

 private:
  // One helper's work: the caller writes share and then go (a new number) while the helper is idle.
  struct Slot {
    std::thread thread;
    int pinned = -1;  // the core the helper is pinned to, -1 before the first pin
    const std::function<void(int64_t)>* share = nullptr;
    std::atomic<uint64_t> go{0};
  };

  ~ShareThreads() {
    stop_.store(true);
    {
      std::lock_guard<std::mutex> lk(mu_);
    }
    wake_.notify_all();
    for (auto& s : slots_) s->thread.join();
  }

  void run_shares(int64_t n, const std::function<void(int64_t)>& share) {
    std::lock_guard<std::mutex> one_at_a_time(busy_);  // callers on several threads take turns
    while (static_cast<int64_t>(slots_.size()) < n - 1) {
      slots_.push_back(std::make_unique<Slot>());
      const int64_t id = static_cast<int64_t>(slots_.size());
      Slot* slot = slots_.back().get();
      slot->thread = std::thread([this, id, slot] { loop(id, *slot); });
    }
    pin_away_from_caller(n);
    pending_.store(n - 1);
    ++generation_;
    for (int64_t i = 1; i < n; ++i) {
      Slot& s = *slots_[static_cast<size_t>(i - 1)];
      s.share = &share;
      s.go.store(generation_);
    }
    if (sleeping_helpers_.load() > 0) {  // a helper that checks its slot under mu_ after this sees the new number
      {
        std::lock_guard<std::mutex> lk(mu_);
      }
      wake_.notify_all();
    }
    share(0);
    if (spin_until([&] { return pending_.load() == 0; })) return;
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeping_.store(true);
    done_.wait(lk, [&] { return pending_.load() == 0; });
    caller_sleeping_.store(false);
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
      Slot& s = *slots_[static_cast<size_t>(i - 1)];
      const int cpu = others[static_cast<size_t>(i - 1) % others.size()];
      if (s.pinned == cpu) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (pthread_setaffinity_np(s.thread.native_handle(), sizeof one, &one) == 0) s.pinned = cpu;
    }
  }

  void loop(int64_t id, Slot& slot) {
    uint64_t seen = 0;
    for (;;) {
      auto ready = [&] { return stop_.load() || slot.go.load() != seen; };
      if (!spin_until(ready)) {
        std::unique_lock<std::mutex> lk(mu_);
        sleeping_helpers_.fetch_add(1);
        wake_.wait(lk, ready);
        sleeping_helpers_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = slot.go.load();
      (*slot.share)(id);
      if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        done_.notify_one();
      }
    }
  }

  std::mutex busy_, mu_;
  std::condition_variable wake_, done_;
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t generation_ = 0;  // the caller's own count (under busy_)
  std::atomic<int64_t> pending_{0};
  std::atomic<int> sleeping_helpers_{0};
  std::atomic<bool> caller_sleeping_{false}, stop_{false};
};
}  // namespace

void run_shares(int64_t n, const std::function<void(int64_t)>& share) { ShareThreads::run(n, share); }

void share_rows(int64_t n, int64_t min_rows, const std::function<void(int64_t, int64_t)>& rows) {
  const int64_t shares = std::max<int64_t>(1, std::min<int64_t>(blas_threads(), n / std::max<int64_t>(1, min_rows)));
  run_shares(shares, [&](int64_t s) { rows(n * s / shares, n * (s + 1) / shares); });
}

}  // namespace attnmt
