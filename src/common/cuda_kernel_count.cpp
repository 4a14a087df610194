// count_cuda_kernels (common/dispatch_count.h): LibTorch's Kineto profiler from C++, as torch.profiler drives it from
// Python (prepare, enable with the CPU and CUDA activities, run, disable, read the events).
#include <set>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "common/dispatch_count.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace attnmt {

int64_t count_cuda_kernels(const std::function<void()>& f) {
#if TORCH_VERSION_MAJOR >= 2
  if (!torch::cuda::is_available()) return -1;
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  const ProfilerConfig config(ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const std::exception& e) {
    static bool said = false;
    if (!said) spdlog::warn("no CUDA kernel count: LibTorch's profiler did not start ({})", e.what());
    said = true;
    return -1;
  }
  try {
    f();
    torch::cuda::synchronize();
  } catch (...) {
    prof::disableProfiler();
    throw;
  }
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  int64_t n = 0;
  for (const auto& e : result->events())
    if (e.deviceType() == c10::DeviceType::CUDA) ++n;
  return n;
#else
  (void)f;
  return -1;
#endif
}

}  // namespace attnmt
