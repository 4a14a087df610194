// attnmt train --config FILE [--set key=value]... [--resume] [--overwrite]
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/runtime.h"

namespace attnmt::cli {

namespace {
struct TrainOptions {
  std::string config;                 // JSON config file
  std::vector<std::string> overrides; // --set key.path=value
  bool resume = false;                // continue from run_dir/last.pt
  bool overwrite = false;             // replace an existing run in run_dir
};
}  // namespace

Command setup_train(CLI::App& parent, const GlobalOptions& g) {
  auto opt = std::make_shared<TrainOptions>();
  auto* app = parent.add_subcommand("train", "Train a model from a JSON config");
  app->add_option("--config,-c", opt->config, "JSON config file (see configs/README.md)")->required();
  app->add_option("--set", opt->overrides, "Override a config key: key.path=value (repeatable)");
  auto* resume = app->add_flag("--resume", opt->resume, "Continue the run in run_dir from last.pt");
  app->add_flag("--overwrite", opt->overwrite, "Replace an existing run in run_dir")->excludes(resume);
  return {app, [opt, &g]() -> int {
            Config cfg = load_config(opt->config, opt->overrides);
            if (!g.device.empty()) cfg.device = g.device;
            validate(cfg);
            check_data_files(cfg, true);
            throw Error("'train' is not implemented yet");
          }};
}

}  // namespace attnmt::cli
