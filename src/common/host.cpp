#include "common/host.h"

#include <atomic>

namespace attnmt {

namespace {
std::atomic<int64_t> g_host_reads{0};
std::atomic<int64_t> g_device_sends{0};
}  // namespace

int64_t host_reads() { return g_host_reads.load(std::memory_order_relaxed); }

int64_t device_sends() { return g_device_sends.load(std::memory_order_relaxed); }

torch::Tensor to_device(const torch::Tensor& cpu, const torch::Device& device) {
  TORCH_CHECK(cpu.is_cpu(), "to_device: a host tensor expected, got one on ", cpu.device());
  g_device_sends.fetch_add(1, std::memory_order_relaxed);
  return device.is_cpu() ? cpu : cpu.pin_memory().to(device, /*non_blocking=*/true);
}

HostTensor to_host(const torch::Tensor& t, torch::ScalarType dtype) {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  HostTensor h;
  // Converted where it lives (fewer bytes to copy), then one copy.
  h.t_ = t.to(t.device(), dtype).to(torch::kCPU).contiguous();
  return h;
}

}  // namespace attnmt
