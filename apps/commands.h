// Subcommand registry: each apps/cmd_<name>.cpp defines setup_<name>(), which adds its options to the
// parent CLI11 app and returns the subcommand together with the function that runs it.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/config.h"

namespace attnmt::cli {

struct GlobalOptions {
  std::string log_level = "info";  // spdlog level
  int threads = 0;                 // BLAS threads (0 = all cores)
  int intra_threads = 1;           // LibTorch intra-op threads (0 = same as threads)
  std::string device;              // auto | cpu | cuda | cuda:N; empty = the config's (default auto)
  std::string kernels;             // auto | reference; empty = ATTNMT_KERNELS, else auto
  std::string precision;           // fp32 | tf32 | bf16; empty = fp32, or for train the config's train.precision
};

// The built-in defaults, for help texts that name a config key (config_key(defaults(), &defaults().eval.beam_size)).
inline const Config& defaults() {
  static const Config c;
  return c;
}

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code; may throw UsageError / Error
};

Command setup_train(CLI::App& parent, const GlobalOptions& g);
Command setup_evaluate(CLI::App& parent, const GlobalOptions& g);
Command setup_translate(CLI::App& parent, const GlobalOptions& g);
Command setup_attention(CLI::App& parent, const GlobalOptions& g);
Command setup_bleu(CLI::App& parent, const GlobalOptions& g);
Command setup_corpus(CLI::App& parent, const GlobalOptions& g);
Command setup_compare(CLI::App& parent, const GlobalOptions& g);
Command setup_bench(CLI::App& parent, const GlobalOptions& g);
Command setup_config(CLI::App& parent, const GlobalOptions& g);
Command setup_average(CLI::App& parent, const GlobalOptions& g);
Command setup_lab(CLI::App& parent, const GlobalOptions& g);
Command setup_serve(CLI::App& parent, const GlobalOptions& g);
Command setup_explain(CLI::App& parent, const GlobalOptions& g);

}  // namespace attnmt::cli
