#include "common/runtime.h"

#include <thread>

#include <ATen/Parallel.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "common/errors.h"

// OpenBLAS's own thread controls. Declared weak so that a LibTorch built against another BLAS (MKL in
// a user-supplied CUDA build, say) still links; then they are null and we report that.
extern "C" {
int openblas_get_num_threads(void) __attribute__((weak));
void openblas_set_num_threads(int) __attribute__((weak));
char* openblas_get_config(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
}

namespace attnmt {

void setup_logging(const std::string& level) {
  static bool created = false;
  if (!created) {
    auto logger = spdlog::stderr_color_mt("attnmt");
    logger->set_pattern("[%H:%M:%S] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    created = true;
  }
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    throw UsageError("--log-level: unknown level '" + level + "'. Valid options: trace, debug, info, warn, error, off");
  spdlog::set_level(lvl);
}

ThreadInfo setup_threads(int n, int intra) {
  if (n < 0) throw UsageError("--threads: must be >= 0 (0 = all cores), got " + std::to_string(n));
  if (intra < 0) throw UsageError("--intra-threads: must be >= 0 (0 = same as --threads), got " + std::to_string(intra));
  if (n == 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (intra == 0) intra = n;
  // OpenBLAS's pthreads and LibTorch's OpenMP threads busy-wait against each other when both are
  // > 1 on a small machine (measured: 1300 vs 3850 target tokens/s training the toy Bahdanau model
  // on 2 cores), so LibTorch's own intra-op threads default to 1 (see --intra-threads).
  at::set_num_threads(intra);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  else at::set_num_threads(std::max(intra, n));  // another BLAS (MKL, say) runs on LibTorch's threads
  ThreadInfo info;
  info.intra_op = at::get_num_threads();
  info.blas = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  info.blas_name = openblas_get_config ? std::string("OpenBLAS (") + openblas_get_config() + ")" : "not OpenBLAS";
  return info;
}

std::string blas_info() {
  return openblas_get_config ? std::string(openblas_get_config()) : std::string("not OpenBLAS");
}

std::string blas_kernel_warning() {
  if (!openblas_get_corename) return "";
  std::string core = openblas_get_corename();
  if (core != "Prescott" && core != "prescott") return "";
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : nullptr;
  if (!better) return "";
  return std::string("OpenBLAS uses its generic Prescott kernels on this CPU, which supports ") +
         (better == std::string("SkylakeX") ? "AVX-512" : "AVX2") +
         "; matrix products may run several times faster with OPENBLAS_CORETYPE=" + better +
         " set in the environment (README, Performance)";
}

torch::Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return torch::Device(torch::kCPU);
  if (spec == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
    if (!torch::cuda::is_available())
      throw UsageError("device '" + spec + "': CUDA is not available (this LibTorch has no CUDA or there is no GPU)");
    int index = 0;
    if (spec.size() > 5) {
      try {
        index = std::stoi(spec.substr(5));
      } catch (const std::exception&) {
        throw UsageError("device '" + spec + "': expected cuda:N");
      }
    }
    if (index < 0 || index >= static_cast<int>(torch::cuda::device_count()))
      throw UsageError("device '" + spec + "': only " + std::to_string(torch::cuda::device_count()) + " CUDA device(s)");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw UsageError("device: unknown value '" + spec + "'. Valid options: auto, cpu, cuda, cuda:N");
}

}  // namespace attnmt
