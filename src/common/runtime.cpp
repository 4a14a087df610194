#include "common/runtime.h"

#include "common/host.h"

#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/detail/CUDAHooksInterface.h>

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

const char* env_var(const char* name) { return std::getenv(name); }

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

int blas_threads() { return std::max(1, openblas_get_num_threads ? openblas_get_num_threads() : at::get_num_threads()); }

std::string blas_info() {
  return openblas_get_config ? std::string(openblas_get_config()) : std::string("not OpenBLAS");
}

std::string blas_kernel() { return openblas_get_corename ? std::string(openblas_get_corename()) : std::string(); }

std::string preferred_blas_kernel() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

bool is_generic_blas_kernel(const std::string& core) {
  std::string c = core;
  for (auto& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return c == "prescott" || c == "core2" || c == "katmai" || c == "coppermine" || c == "northwood" || c == "banias" ||
         c == "atom" || c == "nehalem";
}

namespace {
constexpr const char* kAutoEnv = "ATTNMT_BLAS_AUTO";  // set by attnmt alongside the OPENBLAS_CORETYPE it chose
std::string g_choice;                                // blas_kernel_choice()'s line

// The family to try after `failed` ("" = none left but the generic kernel).
std::string next_candidate(const std::string& failed) {
  return failed == "SkylakeX" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : "";
}

[[noreturn]] void reexec(char** argv, const char* core, const char* mark) {
  ::setenv("OPENBLAS_CORETYPE", core, 1);
  ::setenv(kAutoEnv, mark, 1);
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv);
  ::execvp(argv[0], argv);  // no /proc: the name it was started by
  std::fprintf(stderr, "attnmt: cannot re-execute itself to select the OpenBLAS kernel (%s); set OPENBLAS_CORETYPE=%s\n",
               std::strerror(errno), core);
  std::_Exit(kExitFailure);
}
}  // namespace

void choose_blas_kernel(char** argv) {
  const std::string core = blas_kernel();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const char* mark = std::getenv(kAutoEnv);
  if (core.empty()) {
    g_choice = "not OpenBLAS";
    return;
  }
  if (user && mark && std::string(mark) == "generic") {
    g_choice = core + " (generic: attnmt's checks of the faster kernels failed on this CPU)";
    return;
  }
  if (user && mark && std::string(mark) == user) {
    // This process is the re-executed one: use the kernel only if OpenBLAS took it and its products are right.
    const std::string why = "chosen by attnmt: OpenBLAS's own choice was its generic kernel on this CPU; OPENBLAS_CORETYPE overrides";
    BlasCheck chk = ::strcasecmp(core.c_str(), user) == 0 ? check_blas_products(/*thorough=*/false)
                                                           : BlasCheck{false, 0, "OpenBLAS runs " + core + " instead"};
    if (const char* reject = std::getenv("ATTNMT_TEST_BLAS_REJECT");
        reject && (std::string(",") + reject + ",").find(std::string(",") + user + ",") != std::string::npos)
      chk = BlasCheck{false, chk.products, "rejected for a test"};
    if (chk.ok) {
      g_choice = core + " (" + why + "; " + std::to_string(chk.products) + " products checked)";
      return;
    }
    std::fprintf(stderr, "attnmt: OpenBLAS kernel %s rejected (%s); trying the next one\n", user, chk.failure.c_str());
    const std::string next = next_candidate(user);
    if (!next.empty()) reexec(argv, next.c_str(), next.c_str());
    reexec(argv, "Prescott", "generic");
  }
  if (user) {
    g_choice = core + " (OPENBLAS_CORETYPE=" + user + " set in the environment)";
    return;
  }
  const std::string better = preferred_blas_kernel();
  const bool generic = is_generic_blas_kernel(core) || std::getenv("ATTNMT_TEST_BLAS_GENERIC") != nullptr;
  if (generic && !better.empty()) reexec(argv, better.c_str(), better.c_str());
  g_choice = core + " (OpenBLAS's own choice for this CPU)";
}

CpuPeak cpu_peak() {
  CpuPeak p;
  p.cores = static_cast<int>(std::thread::hardware_concurrency());
  p.lanes = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx") ? 8 : 4;
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), f))
      if (std::strncmp(line, "cpu MHz", 7) == 0) {
        if (const char* colon = std::strchr(line, ':')) p.clock_ghz = std::atof(colon + 1) / 1000.0;
        break;
      }
    std::fclose(f);
  }
  p.gflops = p.cores * p.lanes * p.fma_units * 2 * p.clock_ghz;
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "%d logical cores x %d float32 lanes (%s) x %d FMA units (assumed) x 2 FLOP per FMA x %.3f GHz (/proc/cpuinfo, "
                "nominal) = %.1f GFLOP/s",
                p.cores, p.lanes, p.lanes == 16 ? "AVX-512" : p.lanes == 8 ? "AVX/AVX2" : "SSE", p.fma_units, p.clock_ghz, p.gflops);
  p.derivation = buf;
  return p;
}

std::string blas_kernel_choice() { return g_choice.empty() ? blas_kernel() + " (OpenBLAS's own choice)" : g_choice; }

namespace {
// Freivalds' test of c = a b (a [m, k], b [k, n], c [m, n], any strides): c x against a (b x) in double for a
// random x, with the rounding bound of a k-term dot product in the result's precision.
bool product_is_right(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c, std::mt19937_64& gen,
                      std::string* why) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (c.dim() != 2 || c.size(0) != m || c.size(1) != n) {
    *why = "wrong result shape";
    return false;
  }
  const std::vector<double> A = cpu_vector<double>(a), B = cpu_vector<double>(b), C = cpu_vector<double>(c);
  const double *pa = A.data(), *pb = B.data(), *pc = C.data();
  const double u = c.scalar_type() == torch::kFloat ? 0x1p-24 : 0x1p-53;
  const double tol = 2.0 * static_cast<double>(k + n + 2) * u;
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(k), 0.0), yb(static_cast<size_t>(k), 0.0);
    for (auto& v : x) v = uni(gen);
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) {
        y[l] += pb[l * n + j] * x[j];
        yb[l] += std::fabs(pb[l * n + j] * x[j]);
      }
    for (int64_t i = 0; i < m; ++i) {
      double z = 0, zb = 0, w = 0;
      for (int64_t l = 0; l < k; ++l) {
        z += pa[i * k + l] * y[l];
        zb += std::fabs(pa[i * k + l]) * yb[l];
      }
      for (int64_t j = 0; j < n; ++j) w += pc[i * n + j] * x[j];
      if (!std::isfinite(w) || std::fabs(w - z) > tol * zb + 1e-300) {
        *why = "row " + std::to_string(i) + " off by " + std::to_string(std::fabs(w - z)) + " (bound " + std::to_string(tol * zb) + ")";
        return false;
      }
    }
  }
  return true;
}

torch::Tensor random_matrix(int64_t rows, int64_t cols, torch::ScalarType type, std::mt19937_64& gen) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (double& x : v) x = uni(gen);
  return from_host(v).view({rows, cols}).to(type);
}
}  // namespace

bool product_matches_reference(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c, std::string* why) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "product_matches_reference: a [m, k] and b [k, n] expected, got ",
              a.sizes(), " and ", b.sizes());
  std::mt19937_64 gen(7);
  std::string w;
  const bool ok = product_is_right(a, b, c, gen, &w);
  if (why) *why = w;
  return ok;
}

BlasCheck check_blas_products(bool thorough) {
  torch::NoGradGuard no_grad;
  BlasCheck r;
  std::mt19937_64 gen(20261130);  // its own generator: LibTorch's stays untouched (seeded runs stay the same)
  std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {3, 5, 7}, {5, 0, 4}, {17, 33, 9}, {64, 64, 64}, {67, 31, 45}};
  if (thorough) {
    for (std::array<int64_t, 3> s : {std::array<int64_t, 3>{2, 1024, 3}, {127, 255, 129}, {256, 256, 256}, {511, 513, 257},
                                     {64, 512, 8000}, {1024, 1024, 1024}, {1024, 0, 1}})
      shapes.push_back(s);
  }
  auto fail = [&](const std::string& what, const std::string& why) {
    if (r.ok) r.failure = what + ": " + why;
    r.ok = false;
  };
  for (torch::ScalarType type : {torch::kFloat, torch::kDouble}) {
    const std::string tname = type == torch::kFloat ? "float" : "double";
    for (const auto& [m, k, n] : shapes) {
      for (int trans = 0; trans < 4; ++trans) {
        const bool ta = trans & 1, tb = trans & 2;
        // Operands stored transposed where asked, so that the BLAS call gets the transpose flags the model's uses do.
        const torch::Tensor a = ta ? random_matrix(k, m, type, gen).t() : random_matrix(m, k, type, gen);
        const torch::Tensor b = tb ? random_matrix(n, k, type, gen).t() : random_matrix(k, n, type, gen);
        std::string why;
        ++r.products;
        if (!product_is_right(a, b, torch::mm(a, b), gen, &why))
          fail(tname + " mm " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + (ta ? " A^T" : "") +
                   (tb ? " B^T" : ""),
               why);
      }
      // Matrix-vector (gemv) both ways, and a batch of three products (bmm).
      const torch::Tensor a = random_matrix(m, k, type, gen), v = random_matrix(k, 1, type, gen);
      std::string why;
      ++r.products;
      if (!product_is_right(a, v, torch::mv(a, v.squeeze(1)).unsqueeze(1), gen, &why)) fail(tname + " mv", why);
      const torch::Tensor at = random_matrix(k, m, type, gen);
      ++r.products;
      if (!product_is_right(at.t(), v, torch::mv(at.t(), v.squeeze(1)).unsqueeze(1), gen, &why)) fail(tname + " mv A^T", why);
      torch::Tensor ba = torch::stack({random_matrix(m, k, type, gen), random_matrix(m, k, type, gen), random_matrix(m, k, type, gen)});
      torch::Tensor bb = torch::stack({random_matrix(k, n, type, gen), random_matrix(k, n, type, gen), random_matrix(k, n, type, gen)});
      const torch::Tensor bc = torch::bmm(ba, bb);
      for (int64_t i = 0; i < 3; ++i) {
        ++r.products;
        if (!product_is_right(ba[i], bb[i], bc[i], gen, &why)) fail(tname + " bmm", why);
      }
    }
  }
  return r;
}

const char* libtorch_version() { return TORCH_VERSION; }

std::string build_description() {
  std::string d = std::string("LibTorch ") + libtorch_version();
  if (!at::detail::getCUDAHooks().hasCUDART()) return d + ", CPU only";
  const long v = at::detail::getCUDAHooks().versionCUDART();  // e.g. 13000
  return d + " with CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string cuda_unavailable_reason() {
  if (!at::detail::getCUDAHooks().hasCUDART()) return "this attnmt's LibTorch was built without CUDA";
  if (torch::cuda::device_count() == 0) return "this attnmt's LibTorch has CUDA, but no CUDA device is visible";
  return "";
}

torch::Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return torch::Device(torch::kCPU);
  if (spec == "auto") {
    const std::string why = cuda_unavailable_reason();
    if (why.empty()) {
      spdlog::info("device auto: cuda:0 ({} CUDA device(s) visible)", torch::cuda::device_count());
      return torch::Device(torch::kCUDA, 0);
    }
    spdlog::info("device auto: cpu ({})", why);
    return torch::Device(torch::kCPU);
  }
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw UsageError("device '" + spec + "': " + why);
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
