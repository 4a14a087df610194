#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/share_threads.h"

using namespace attnmt;

// run_shares: every share of every call runs exactly once, and the call returns only once all have run, whether
// the helpers are still spinning from the call before (no gap), have just stopped spinning, or sleep (a gap well
// past the spin); helpers a call does not use stay idle; two callers on their own threads take turns.
TEST(ShareThreads, EveryShareRunsOnceWhetherHelpersSpinOrSleep) {
  int calls = 0;
  for (int64_t n : {2, 4, 3, 1}) {
    for (int gap_us : {0, 900, 5000}) {
      std::vector<std::atomic<int>> hits(4);
      for (int call = 1; call <= 30; ++call) {
        run_shares(n, [&](int64_t s) {
          if (s == n - 1) std::this_thread::sleep_for(std::chrono::microseconds(call % 3 == 0 ? 300 : 0));  // a slow share
          hits[static_cast<size_t>(s)].fetch_add(1);
        });
        for (int64_t s = 0; s < 4; ++s) ASSERT_EQ(hits[static_cast<size_t>(s)].load(), s < n ? call : 0) << "n " << n << " share " << s;
        ++calls;
        if (gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
      }
    }
  }
  EXPECT_EQ(calls, 4 * 3 * 30);
  // Two callers at once: each call's shares all run, and no call sees another's (the shares write per-call slots).
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0}, done{0};
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, c] {
      for (int call = 0; call < 200; ++call) {
        std::vector<int> seen(3, -1);
        run_shares(3, [&](int64_t s) { seen[static_cast<size_t>(s)] = c * 1000 + call; });
        for (int v : seen)
          if (v != c * 1000 + call) wrong.fetch_add(1);
        done.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(done.load(), 400);
  EXPECT_EQ(wrong.load(), 0);
}

// share_rows covers [0, n) in contiguous pieces, each row once, with at least min_rows rows a piece.
TEST(ShareThreads, ShareRowsCoversEveryRowOnce) {
  for (int64_t n : {0, 1, 7, 64, 1001}) {
    for (int64_t min_rows : {1, 8, 2000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> pieces{0}, too_small{0};
      share_rows(n, min_rows, [&](int64_t r0, int64_t r1) {
        pieces.fetch_add(1);
        if (r1 - r0 < std::min(n, min_rows)) too_small.fetch_add(1);
        for (int64_t r = r0; r < r1; ++r) hits[static_cast<size_t>(r)].fetch_add(1);
      });
      ASSERT_EQ(hits.size(), static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) ASSERT_EQ(hits[static_cast<size_t>(r)].load(), 1) << "n " << n << " row " << r;
      EXPECT_GE(pieces.load(), 1);
      EXPECT_EQ(too_small.load(), 0) << "n " << n << " min_rows " << min_rows;
    }
  }
}
