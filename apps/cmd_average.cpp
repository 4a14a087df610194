// attnmt average --run DIR [--last N | --checkpoints A.pt B.pt ...] --out AVG.pt
// Checkpoint averaging: the element-wise mean of the parameters of several checkpoints of one run.
#include <filesystem>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/fs.h"
#include "data/vocab.h"
#include "run/run_dir.h"
#include "model/checkpoint.h"

namespace attnmt::cli {

Command setup_average(CLI::App& parent, const GlobalOptions&) {
  struct Options {
    std::string run;                       // run directory (its config gives the model)
    int last = 0;                          // the newest N periodic checkpoints
    std::vector<std::string> checkpoints;  // or these files
    std::string out;                       // the averaged checkpoint
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("average", "Average the parameters of several checkpoints of a run into one checkpoint");
  app->add_option("--run,-r", opt->run, "Run directory (its config.json gives the model)")->required();
  auto* last = app->add_option("--last", opt->last,
                               "The newest N periodic checkpoints ckpt-<step>.pt of the run (train with " +
                                   config_key(defaults(), &defaults().train.keep_checkpoints) + " >= N)")
                   ->check(CLI::Range(1, 1000));
  auto* files = app->add_option("--checkpoints", opt->checkpoints, "These checkpoint files (of the run's model)")->excludes(last);
  last->excludes(files);
  app->add_option("--out,-o", opt->out, "Output checkpoint (then: evaluate --run DIR --checkpoint OUT)")->required();
  return {app, [opt]() -> int {
            namespace fs = std::filesystem;
            const RunDir dir(opt->run);
            if (!fs::is_directory(opt->run)) throw UsageError(opt->run + ": run directory not found");
            // Writing into a run directory (its own or another run's) waits for no one: refused while a training holds it.
            DirLock lock;
            const fs::path out_dir = fs::absolute(opt->out).parent_path();
            if (fs::is_regular_file(out_dir / "config.json") || fs::exists(DirLock::file(out_dir.string())))
              lock = DirLock::acquire(out_dir.string(), false);
            for (const auto& f : dir.required_files())
              if (!fs::is_regular_file(f)) throw UsageError(opt->run + ": missing " + fs::path(f).filename().string() + " (not a training run?)");
            std::vector<std::string> paths = opt->checkpoints;
            if (paths.empty()) {
              if (opt->last == 0) throw UsageError("average: give --last N or --checkpoints FILE...");
              std::vector<std::string> all = dir.periodic_checkpoints();
              if (static_cast<int>(all.size()) < opt->last)
                throw UsageError(opt->run + ": --last " + std::to_string(opt->last) + " but the run keeps " + std::to_string(all.size()) +
                                 " periodic checkpoint(s) (ckpt-<step>.pt; train with " +
                                 config_key(defaults(), &defaults().train.keep_checkpoints) + " >= " + std::to_string(opt->last) + ")");
              paths.assign(all.end() - opt->last, all.end());
            }
            for (const auto& p : paths)
              if (fs::absolute(p) == fs::absolute(opt->out)) throw UsageError("--out " + opt->out + " is one of the checkpoints being averaged");
            Config cfg;
            try {
              cfg = config_from_json(read_json_file(dir.config()));
            } catch (const UsageError& e) {
              throw UsageError(dir.config() + ": " + e.what());
            }
            const Vocab sv = Vocab::load(dir.src_vocab()), tv = Vocab::load(dir.tgt_vocab());
            Seq2Seq model(cfg.model, sv.size(), tv.size());
            TrainerState st = average_checkpoints(paths, model);
            st.finished = true;
            save_checkpoint(opt->out, model, nullptr, st);
            spdlog::info("averaged {} checkpoints ({} ... {}) into {}", paths.size(), paths.front(), paths.back(), opt->out);
            return 0;
          }};
}

}  // namespace attnmt::cli
