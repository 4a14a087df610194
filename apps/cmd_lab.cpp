// attnmt lab NAME|all [--out lab] [--minutes 2] ...: the attention lab's experiments (src/lab/lab.h).
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "lab/lab.h"

namespace attnmt::cli {

Command setup_lab(CLI::App& parent, const GlobalOptions& g) {
  auto opt = std::make_shared<LabOptions>();
  auto names = std::make_shared<std::vector<std::string>>();
  std::string list;
  for (const auto& n : lab_experiments()) list += (list.empty() ? "" : ", ") + n;
  auto* app = parent.add_subcommand("lab", "The attention lab: each claim of the lesson as an experiment on the shipped corpus, "
                                           "with a report page (OUT/<name>/index.html, OUT/index.html)");
  app->add_option("experiments", *names, "Experiments to run: " + list + ", or all")->required();
  app->add_option("--out,-o", opt->out, "Report directory (trained runs go to OUT/runs/)")->capture_default_str();
  app->add_option("--configs", opt->configs, "Folder of the shipped configs the runs start from")->capture_default_str();
  app->add_option("--minutes", opt->minutes, "Training budget of each model the masks and heads experiments compare (minutes)")
      ->capture_default_str()->check(CLI::Range(0.01, 600.0));
  app->add_option("--bottleneck-minutes", opt->bottleneck_minutes, "Training budget of each model of the fair bottleneck (minutes)")
      ->capture_default_str()->check(CLI::Range(0.01, 600.0));
  app->add_option("--patience", opt->patience, "Validations without improvement that end a run")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  app->add_option("--scaling-steps", opt->scaling_steps, "Updates of each scaling run")->capture_default_str()->check(CLI::Range(6, 1000000));
  app->add_option("--explain-sentences", opt->explain_sentences, "Test sentences the attribution experiment reads")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app->add_flag("--retrain", opt->retrain, "Train again even where a finished run of the same config is there");
  return {app, [opt, names, &g]() -> int {
            std::vector<std::string> todo;
            for (const auto& n : *names) {
              if (n == "all") {
                todo.insert(todo.end(), lab_experiments().begin(), lab_experiments().end());
                continue;
              }
              if (std::find(lab_experiments().begin(), lab_experiments().end(), n) == lab_experiments().end()) {
                std::string valid;
                for (const auto& e : lab_experiments()) valid += (valid.empty() ? "" : ", ") + e;
                throw UsageError("lab: unknown experiment '" + n + "'. Valid options: " + valid + ", all");
              }
              todo.push_back(n);
            }
            if (!g.device.empty()) opt->device = g.device;
            try {
              for (const auto& n : todo) {
                const LabReport r = run_lab_experiment(n, *opt);
                std::printf("%s: %s\n", n.c_str(), r.finding.c_str());
              }
            } catch (const LabInterrupted& e) {
              spdlog::warn("{}", e.what());
              return e.exit_code;
            }
            std::printf("lab: %s/index.html\n", opt->out.c_str());
            return 0;
          }};
}

}  // namespace attnmt::cli
