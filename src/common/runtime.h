// Process-wide runtime set-up: logging, threads, device selection.
#pragma once
#include <string>

#include <torch/types.h>

namespace attnmt {

// Sets the default spdlog logger (stderr) and its level: trace|debug|info|warn|error|off.
void setup_logging(const std::string& level);

struct ThreadInfo {
  int intra_op = 0;         // LibTorch intra-op threads in use
  int blas = -1;            // OpenBLAS threads, -1 when the BLAS library is not OpenBLAS
  std::string blas_name;    // which BLAS library answers (e.g. "OpenBLAS 0.3.21 ..."), or "unknown"
};

// Sets OpenBLAS's threads (and, where the BLAS is not OpenBLAS, LibTorch's) to n (0 = all cores)
// and LibTorch's intra-op threads to intra (0 = n).
ThreadInfo setup_threads(int n, int intra);

// The BLAS library that answers, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64"
// (the kernel family it picked for this CPU is named there), or "not OpenBLAS".
std::string blas_info();

// A warning when OpenBLAS runs its generic Prescott kernels on a CPU with AVX2 or AVX-512 (Debian's
// OpenBLAS 0.3.21 does so on CPUs it does not recognise: 54 instead of 254 GFLOP/s measured here), else "".
std::string blas_kernel_warning();

// Resolves "auto" | "cpu" | "cuda" | "cuda:N" to a device; throws UsageError when CUDA is asked for
// but not available.
torch::Device resolve_device(const std::string& spec);

}  // namespace attnmt
