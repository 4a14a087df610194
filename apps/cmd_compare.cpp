// attnmt compare RUN_DIR... --out DIR [--split test|valid]
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "eval/report.h"
#include "run/run_dir.h"

namespace attnmt::cli {

Command setup_compare(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::vector<std::string> runs;  // run directories
    std::string out;                // report directory
    std::string split = "test";     // which evaluation to compare
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("compare", "Compare runs: report.md/json, BLEU-by-length chart, index.html");
  app->add_option("runs", opt->runs, "Run directories")->required();
  app->add_option("--out,-o", opt->out, "Output directory")->required();
  app->add_option("--split", opt->split, "test | valid")->capture_default_str()->check(CLI::IsMember({"test", "valid"}));
  return {app, [opt, &g]() -> int {
            // Check every run first: summarizing evaluates runs that lack an evaluation and writes it there.
            for (const auto& d : opt->runs)
              if (!std::filesystem::is_regular_file(RunDir(d).config()))
                throw UsageError(d + ": not a run directory (no config.json)");
            std::vector<RunSummary> runs;
            for (const auto& d : opt->runs) runs.push_back(summarize_run(d, opt->split, g.device));
            write_comparison(opt->out, runs, opt->split);
            std::fputs(comparison_table_text(runs).c_str(), stdout);
            spdlog::info("{}", comparison_paragraph(runs));
            spdlog::info("wrote {}/report.md, report.json, bleu_by_length.svg, index.html", opt->out);
            return 0;
          }};
}

}  // namespace attnmt::cli
