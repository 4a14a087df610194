#include "kernels/mode.h"

#include <atomic>

#include "common/precision.h"
#include "kernels/lanes.h"
#include "kernels/packed_product.h"

namespace attnmt {

namespace {
std::atomic<int> g_mode{static_cast<int>(KernelMode::kAuto)};
}  // namespace

void set_kernel_mode(KernelMode m) { g_mode.store(static_cast<int>(m)); }

KernelMode kernel_mode() { return static_cast<KernelMode>(g_mode.load()); }

bool parse_kernel_mode(const std::string& s, KernelMode* m) {
  if (s == "auto") *m = KernelMode::kAuto;
  else if (s == "reference") *m = KernelMode::kReference;
  else return false;
  return true;
}

const char* kernel_mode_name(KernelMode m) { return m == KernelMode::kReference ? "reference" : "auto"; }

// Under bf16 autocast (common/precision.h) every product is LibTorch's, in bfloat16: the float32 kernels stand aside.
bool kernels_on(const torch::Device& device) {
  return kernel_mode() == KernelMode::kAuto && device.is_cpu() && !autocast_on(device);
}

bool kernels_for(const torch::Tensor& t) {
  return !t.defined() || (kernels_on(t.device()) && t.scalar_type() == torch::kFloat);
}

std::string kernel_choice() {
  if (kernel_mode() == KernelMode::kReference) return "reference (plain LibTorch operations, the path a CUDA device takes)";
  return "auto (CPU kernels in " + std::to_string(cpu_lanes()) + " lanes; training products: " + product_kernel_choice() + ")";
}

}  // namespace attnmt
