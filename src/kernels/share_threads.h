// Work split between the caller and helper threads, for the hand-written kernels that stand in for a BLAS product
// or an elementwise pass (as many threads as the BLAS uses: the helpers run while the BLAS's threads wait).
#pragma once
#include <cstdint>
#include <functional>

namespace attnmt {

// Runs share(0) on the caller and share(1) .. share(n - 1) on helper threads; returns when all are done. Callers
// on several threads take turns.
void run_shares(int64_t n, const std::function<void(int64_t)>& share);

// rows(r0, r1) over [0, n) in contiguous shares, as many as the BLAS has threads but at least min_rows rows each.
void share_rows(int64_t n, int64_t min_rows, const std::function<void(int64_t, int64_t)>& rows);

}  // namespace attnmt
