// Process-wide runtime set-up: logging, threads, device selection.
#pragma once
#include <string>

#include <torch/types.h>

namespace attnmt {

// The process environment, read in one place: the value of variable `name`, or null when it is unset.
// (Distributed launch reads the torchrun variables through it; test hooks are read only by the CLI.)
const char* env_var(const char* name);

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

// How many threads the BLAS runs products on (OpenBLAS's own count, else LibTorch's intra-op threads): the
// hand-written kernels that stand in for a product use as many.
int blas_threads();

// The BLAS library that answers, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64"
// (the kernel family it picked for this CPU is named there), or "not OpenBLAS".
std::string blas_info();

// The kernel family OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or "" when the BLAS is not OpenBLAS.
std::string blas_kernel();

// The better OpenBLAS kernel family this CPU supports: "SkylakeX" (AVX-512 F/CD/BW/DQ/VL), "Haswell" (AVX2 + FMA),
// or "" (nothing better than the generic kernel).
std::string preferred_blas_kernel();

// Fast by default. Debian's OpenBLAS 0.3.21 does not recognise recent CPUs and falls back to its generic
// Prescott kernels (about a fifth of the speed of SkylakeX on an AVX-512 CPU). OpenBLAS reads
// OPENBLAS_CORETYPE only when it loads, so the choice is made by re-executing the process once:
//   - OPENBLAS_CORETYPE already set (by the user, or by attnmt for this process): never touched;
//   - OpenBLAS runs a generic kernel on a CPU that supports a better one: OPENBLAS_CORETYPE is set to it and the
//     process re-executes itself (same pid, arguments and descriptors); ATTNMT_BLAS_AUTO marks the choice as
//     attnmt's own, and the re-executed process checks the kernel's products (check_blas_products) before
//     using it, falling back to the next family (and finally to the generic kernel) if they are wrong.
// Call in main() after argument parsing (so --help and bad flags cost no restart) and before the first matrix
// product; returns when the process keeps running as it is. Never throws.
// Tests set ATTNMT_TEST_BLAS_GENERIC=1 to take that path on a CPU whose kernel OpenBLAS does recognise, and
// ATTNMT_TEST_BLAS_REJECT=K1[,K2] to make the check fail for those families (the fallback path).
void choose_blas_kernel(char** argv);

// Whether an OpenBLAS kernel family is one of its generic (pre-AVX) ones, such as Prescott.
bool is_generic_blas_kernel(const std::string& core);

// How the kernel in use came to be, one line for the log and `bench --json`, e.g. "SkylakeX (chosen by attnmt: ...)".
std::string blas_kernel_choice();

// The CPU's theoretical float32 peak: cores x vector lanes x FMA units x 2 x clock, each factor with where
// it came from (the FMA unit count is not visible to software: assumed 2, as on server cores with AVX-512
// or AVX2; the clock is the nominal one /proc/cpuinfo shows, turbo not included).
struct CpuPeak {
  int cores = 0;
  int lanes = 0;       // float32 lanes of the widest vector unit the CPU reports
  int fma_units = 2;   // assumed
  double clock_ghz = 0;
  double gflops = 0;
  std::string derivation;
};
CpuPeak cpu_peak();

struct BlasCheck {
  bool ok = true;
  int products = 0;     // products checked
  std::string failure;  // the first wrong product, when !ok
};

// Runs matrix products through LibTorch in float and double (mm in all four transpose combinations, k = 0,
// odd sizes, matrix-vector, batched) and checks each against a double-precision reference with Freivalds'
// test (C x against A (B x), exact to rounding, O(n^2) per product). quick: sizes up to 67, about a
// millisecond; thorough: sizes up to 1024.
BlasCheck check_blas_products(bool thorough);

// One product's check: c [m, n] against a [m, k] times b [k, n] (Freivalds, in double; tolerance from c's
// precision and k). why, when given, says which row is off and by how much.
bool product_matches_reference(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c, std::string* why = nullptr);

// Resolves "auto" | "cpu" | "cuda" | "cuda:N" to a device; throws UsageError when CUDA is asked for
// but not available.
// ("auto" logs what it chose and why.)
torch::Device resolve_device(const std::string& spec);

// The LibTorch version this attnmt was built with ("1.13.0", "2.14.1"); checkpoints record it.
const char* libtorch_version();
// "LibTorch 2.14.1 with CUDA 13.0" or "LibTorch 1.13.0, CPU only": what --version prints after attnmt's own.
std::string build_description();

// This process's peak resident memory so far, in MiB (getrusage).
double peak_rss_mb();

// Why CUDA cannot be used here ("" when it can): a LibTorch built without CUDA, or no visible device.
std::string cuda_unavailable_reason();

}  // namespace attnmt
