// attnmt: the command-line entry point. Parses arguments, sets up logging, threads and device,
// and hands over to one subcommand. Exit codes: 0 ok, 1 runtime failure, 2 usage/config/input error.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <thread>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "data/tokenizer.h"
#include "common/errors.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "kernels/mode.h"

namespace {
constexpr int kMaxThreads = 1024;

// The process-wide switches of the arithmetic: the kernel switch (kernels/mode.h: the flag, else ATTNMT_KERNELS for
// tests and scripts, else auto) and the precision (common/precision.h: the flag, else fp32; train reads its config's).
void set_arithmetic(const attnmt::cli::GlobalOptions& g) {
  using namespace attnmt;
  std::string kernels = g.kernels;
  const char* env_kernels = std::getenv("ATTNMT_KERNELS");
  const bool from_env = kernels.empty() && env_kernels && *env_kernels;
  if (from_env) kernels = env_kernels;
  if (!kernels.empty()) {
    KernelMode m;
    if (!parse_kernel_mode(kernels, &m))
      throw UsageError(std::string(from_env ? "ATTNMT_KERNELS" : "--kernels") + " must be auto or reference, got '" + kernels + "'");
    set_kernel_mode(m);
  }
  spdlog::info("kernels: {}", kernel_choice());
  Precision p = Precision::kFp32;  // LibTorch's own default lets cuDNN use TF32; attnmt's fp32 does not
  if (!g.precision.empty() && !parse_precision(g.precision, &p))
    throw UsageError("--precision must be fp32, tf32 or bf16, got '" + g.precision + "'");
  set_precision(p);
}

void add_global_options(CLI::App& app, attnmt::cli::GlobalOptions& g) {
  app.add_option("--log-level", g.log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  // Thread counts beyond any machine's cores only spend minutes creating threads.
  app.add_option("--threads", g.threads, "BLAS threads (0 = all cores)")->capture_default_str()->check(CLI::Range(0, kMaxThreads));
  app.add_option("--intra-threads", g.intra_threads,
                 "LibTorch intra-op threads (0 = same as --threads; 1 avoids OpenMP/OpenBLAS contention)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxThreads));
  app.add_option("--device", g.device, "auto|cpu|cuda|cuda:N (auto = CUDA when available; default: the config's)");
  app.add_option("--kernels", g.kernels,
                 "auto|reference: attnmt's CPU kernels where they apply, or plain LibTorch operations everywhere (the path "
                 "a CUDA device takes); default: ATTNMT_KERNELS, else auto");
  app.add_option("--precision", g.precision,
                 "fp32|tf32|bf16: float32; float32 products and cuDNN in TF32 on CUDA; or forward passes autocast to "
                 "bfloat16 (default: fp32, for train the config's train.precision)");
}

// CLI11 reports a misspelled subcommand as "A subcommand is required"; this names it instead. False (and the error
// said) when the first word that is neither a global option nor its value names no subcommand.
bool subcommand_known(const CLI::App& app, const std::vector<attnmt::cli::Command>& commands, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (const CLI::Option* o = app.get_option_no_throw(a); o && o->get_expected_min() > 0) {
      ++i;  // skip the value of a global option such as --log-level
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    bool known = false;
    std::string names;
    for (const auto& c : commands) {
      known = known || c.app->check_name(a);
      names += (names.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) std::cerr << "attnmt: error: unknown subcommand '" << a << "' (choose from " << names << ")\n";
    return known;
  }
  return true;
}

// Logging (rank 0 speaks for a data-parallel job; the other ranks only warn and fail, under their rank), threads
// (workers on one machine share its cores unless --threads says otherwise) and the arithmetic.
void set_up_process(const attnmt::cli::GlobalOptions& g) {
  using namespace attnmt;
  setup_logging(g.log_level);
  if (const char* r = std::getenv("RANK"); r && std::atoi(r) > 0) {
    spdlog::set_pattern(std::string("[%H:%M:%S] [%^%l%$] [rank ") + r + "] %v");
    if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  }
  int threads = g.threads;
  if (const char* lw = std::getenv("LOCAL_WORLD_SIZE"); lw && threads == 0 && std::atoi(lw) > 1)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::atoi(lw));
  ThreadInfo t = setup_threads(threads, g.intra_threads);
  spdlog::debug("threads: LibTorch intra-op {}, BLAS {} ({})", t.intra_op, t.blas, t.blas_name);
  spdlog::info("threads: LibTorch intra-op {}, BLAS {}; BLAS kernel {}", t.intra_op,
               t.blas < 0 ? std::string("n/a (") + t.blas_name + ")" : std::to_string(t.blas), blas_kernel_choice());
  set_arithmetic(g);
}

// Runs the chosen subcommand; every error becomes one line and its exit code.
int run_command(const CLI::App& app, const std::vector<attnmt::cli::Command>& commands,
                const attnmt::cli::GlobalOptions& g) {
  using namespace attnmt;
  try {
    set_up_process(g);
    for (const auto& c : commands)
      if (app.got_subcommand(c.app)) return c.run();
    return kExitUsage;
  } catch (const UsageError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    return kExitFailure;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that cannot be used as given (a symlink loop, no permission, a file where a directory
    // belongs, a name too long) is bad input; anything else the file system says is a failure.
    const std::error_code c = e.code();
    const bool bad_path = c == std::errc::too_many_symbolic_link_levels || c == std::errc::permission_denied ||
                          c == std::errc::not_a_directory || c == std::errc::filename_too_long;
    spdlog::error("{}: {}", e.path1().string(), c.message());
    return bad_path ? kExitUsage : kExitFailure;
  } catch (const c10::Error& e) {
    spdlog::error("torch: {}", e.what_without_backtrace());
    return kExitFailure;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitFailure;
  }
}
}  // namespace

int main(int argc, char** argv) {
  using namespace attnmt;
  CLI::App app{"attnmt: RNN encoder-decoder translation with and without attention", "attnmt"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return std::string("attnmt ") + ATTNMT_VERSION + " (" + build_description() + ")"; });
  cli::GlobalOptions g;
  add_global_options(app, g);
  std::vector<cli::Command> commands = {
      cli::setup_train(app, g),     cli::setup_evaluate(app, g), cli::setup_translate(app, g),
      cli::setup_attention(app, g), cli::setup_bleu(app, g),     cli::setup_corpus(app, g),
      cli::setup_compare(app, g),   cli::setup_bench(app, g),      cli::setup_config(app, g),
      cli::setup_average(app, g),    cli::setup_lab(app, g),       cli::setup_serve(app, g),
      cli::setup_explain(app, g),
  };
  for (auto& c : commands) c.app->fallthrough();  // global flags may follow the subcommand name
  if (!subcommand_known(app, commands, argc, argv)) return kExitUsage;

  // Past a file-size limit (ulimit -f) a write then fails with EFBIG and is reported like a full disk,
  // instead of the default SIGXFSZ killing the process halfway through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << "attnmt: error: " << e.what() << "\n";
    std::cerr << "Run with --help for more information.\n";
    return kExitUsage;
  }

  // Before the first matrix product: run OpenBLAS's fast kernel for this CPU when it fell back to its generic
  // one (may re-execute the process; common/runtime.h says how a user's OPENBLAS_CORETYPE is kept).
  choose_blas_kernel(argv);
  if (const char* spm = std::getenv("ATTNMT_SPM_HELPER"); spm && *spm) set_spm_helper_path(spm);  // else beside attnmt
  return run_command(app, commands, g);
}
