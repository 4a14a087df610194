#include "common/host.h"

#include <atomic>

namespace attnmt {

namespace {
std::atomic<int64_t> g_host_reads{0};
}

int64_t host_reads() { return g_host_reads.load(std::memory_order_relaxed); }

HostTensor to_host(const torch::Tensor& t, torch::ScalarType dtype) {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  HostTensor h;
  // Converted where it lives (fewer bytes to copy), then one copy.
  h.t_ = t.to(t.device(), dtype).to(torch::kCPU).contiguous();
  return h;
}

}  // namespace attnmt
