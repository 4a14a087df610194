// attnmt train --config FILE [--set key=value]... [--resume] [--overwrite]
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/runtime.h"
#include "train/trainer.h"

namespace attnmt::cli {

Command setup_train(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string config;                  // JSON config file
    std::vector<std::string> overrides;  // --set key.path=value
    TrainOptions train;                  // --resume / --overwrite
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("train", "Train a model from a JSON config");
  app->add_option("--config,-c", opt->config, "JSON config file (see configs/README.md)")->required();
  app->add_option("--set", opt->overrides, "Override a config key: key.path=value (repeatable)");
  auto* resume = app->add_flag("--resume", opt->train.resume, "Continue the run in run_dir from last.pt");
  app->add_flag("--overwrite", opt->train.overwrite, "Replace an existing run in run_dir")->excludes(resume);
  return {app, [opt, &g]() -> int {
            Config cfg = load_config(opt->config, opt->overrides);
            if (!g.device.empty()) cfg.device = g.device;
            validate(cfg);
            check_data_files(cfg, true);
            torch::Device device = resolve_device(cfg.device);
            if (auto w = blas_kernel_warning(); !w.empty() && device.is_cpu()) spdlog::warn("{}", w);
            spdlog::info("device: {}", device.str());
            TrainResult r = train(cfg, opt->train, device);
            if (r.exit_code == 0) spdlog::info("run directory: {}", cfg.run_dir);
            return r.exit_code;
          }};
}

}  // namespace attnmt::cli
