// attnmt train --config FILE [--set key=value]... [--resume] [--overwrite] [--nproc N] [--dist-timeout S]
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "train/distributed.h"
#include "train/launcher.h"
#include "train/trainer.h"

namespace attnmt::cli {

Command setup_train(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string config;                  // JSON config file
    std::vector<std::string> overrides;  // --set key.path=value
    TrainOptions train;                  // --resume / --overwrite
    int nproc = 1;                       // local data-parallel workers
    double dist_timeout_s = 600;         // how long a rank waits for the others
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("train", "Train a model from a JSON config");
  app->add_option("--config,-c", opt->config, "JSON config file (see configs/README.md)")->required();
  app->add_option("--set", opt->overrides, "Override a config key: key.path=value (repeatable)");
  auto* resume = app->add_flag("--resume", opt->train.resume, "Continue the run in run_dir from last.pt");
  app->add_flag("--overwrite", opt->train.overwrite, "Replace an existing run in run_dir")->excludes(resume);
  app->add_option("--nproc", opt->nproc,
                  "Train data-parallel in N local processes (c10d/Gloo on 127.0.0.1); across machines set RANK, "
                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT instead")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--dist-timeout", opt->dist_timeout_s, "Seconds a rank waits for the others before giving up")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  return {app, [opt, &g]() -> int {
            Config cfg = load_config(opt->config, opt->overrides);
            if (!g.device.empty()) cfg.device = g.device;
            if (!g.precision.empty()) cfg.train.precision = g.precision;  // checked by main
            validate(cfg);
            check_data_files(cfg, true);
            DistSpec spec = dist_spec_from_env();
            torch::Device device = resolve_device(cfg.device);
            if (wants_local_launch(opt->nproc, spec)) {
              // The launcher holds the run directory for its workers (which do not take it themselves) until they end.
              DirLock lock = DirLock::acquire(cfg.run_dir, true);
              return launch_local_workers(opt->nproc, device);
            }
            std::unique_ptr<Distributed> dist;
            if (spec.world > 1) {
              device = rank_device(spec, device);
              dist = std::make_unique<Distributed>(spec, device,
                                                   std::chrono::milliseconds(static_cast<int64_t>(opt->dist_timeout_s * 1000)));
              opt->train.dist = dist.get();
            }
            spdlog::info("device: {}", device.str());
            // Test hooks (tests/test_kill.cpp, tests/test_train.cpp); unset in normal use.
            if (const char* v = std::getenv("ATTNMT_TEST_SLOW_CHECKPOINT_MS")) opt->train.test_checkpoint_pause_ms = std::atoi(v);
            if (const char* v = std::getenv("ATTNMT_TEST_NAN_AT_STEP")) opt->train.test_nan_at_step = std::atoll(v);
            TrainResult r = train(cfg, opt->train, device);
            if (r.exit_code == 0) spdlog::info("run directory: {}", cfg.run_dir);
            return r.exit_code;
          }};
}

}  // namespace attnmt::cli
