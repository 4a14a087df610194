// Counting what a piece of work dispatches: the ATen operations a GPU would launch kernels for, and the reads of
// tensor values on the host. Both are counted on the CPU, where the same operations run, so that the device path's
// cost can be measured and kept low on a machine without a GPU (bench --json, tests/test_dispatch_count.cpp).
//
// Dispatched operations are counted as the PyTorch-Python peer counts them (../shared/peer/pyref_bench.py,
// count_ops): ATen operations not called from inside another ATen operation (an autograd node's backward counts
// its own operations), less those that only make a view, allocate or read a scalar. They are seen through
// LibTorch's RecordFunction callbacks, the hook its own profiler uses: nothing is counted by hand.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace attnmt {

struct DispatchCount {
  int64_t dispatched_ops = 0;  // top-level ATen operations that compute (what a GPU launches kernels for)
  int64_t root_aten_ops = 0;   // every top-level ATen operation, views and allocations included
  int64_t host_reads = 0;      // reads of tensor values on the host (common/host.h)
};

// Counts while it lives, on every thread. One at a time in a process.
class DispatchCounter {
 public:
  // by_name: also keep how often each dispatched operation ran (tests, and finding what a step is made of).
  explicit DispatchCounter(bool by_name = false);
  ~DispatchCounter();
  DispatchCounter(const DispatchCounter&) = delete;
  DispatchCounter& operator=(const DispatchCounter&) = delete;
  // What was dispatched since this counter started.
  DispatchCount count() const;
  // The dispatched operations by name (without "aten::"), when counted by name.
  std::map<std::string, int64_t> by_name() const;

 private:
  uint64_t handle_ = 0;
  int64_t host_reads_at_start_ = 0;
};

// Whether an ATen operation (without its "aten::" prefix) only makes a view, allocates or reads a scalar: the peer's
// list, which is not counted as dispatched.
bool is_view_or_allocation(const std::string& op);

}  // namespace attnmt

namespace attnmt {

// The work a CUDA device did for f: every event LibTorch's profiler (Kineto, over CUPTI) records on a CUDA device,
// kernels, copies and fills, as the peer's count_ops counts its "cuda_kernels". The true launch count that the CPU-side
// count above stands for. -1 where it cannot be had: no CUDA device visible, a LibTorch before 2.0, or a profiler that
// would not start (the reason is logged once).
int64_t count_cuda_kernels(const std::function<void()>& f);

}  // namespace attnmt
