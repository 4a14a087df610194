// attnmt corpus --out DIR [--seed N] [--train N] [--valid N] [--test N] [--min-len A] [--max-len B]
#include <spdlog/spdlog.h>

#include "commands.h"
#include "data/toy_corpus.h"

namespace attnmt::cli {

Command setup_corpus(CLI::App& parent, const GlobalOptions&) {
  auto opt = std::make_shared<ToyCorpusOptions>();
  auto out = std::make_shared<std::string>();
  auto* app = parent.add_subcommand("corpus", "Generate the English->French grammar corpus with gold alignments");
  app->add_option("--out,-o", *out, "Output directory (writes {train,valid,test,probe}.{en,fr,align})")->required();
  app->add_option("--seed", opt->seed, "Generator seed")->capture_default_str();
  app->add_option("--train", opt->train, "Training pairs")->capture_default_str()->check(CLI::Range(1, 10000000));
  app->add_option("--valid", opt->valid, "Validation pairs")->capture_default_str()->check(CLI::Range(1, 10000000));
  app->add_option("--test", opt->test, "Test pairs")->capture_default_str()->check(CLI::Range(1, 10000000));
  app->add_option("--min-len", opt->min_len, "Shortest English sentence, tokens")->capture_default_str()->check(CLI::Range(4, 1000));
  app->add_option("--max-len", opt->max_len, "Longest English sentence, tokens")->capture_default_str()->check(CLI::Range(4, 1000));
  return {app, [opt, out]() -> int {
            auto stats = write_toy_corpus(*out, *opt);
            const char* names[] = {"train", "valid", "test"};
            for (size_t i = 0; i < stats.size(); ++i) {
              std::string hist;
              for (size_t b = 0; b < stats[i].length_histogram.size(); ++b)
                hist += (b ? " " : "") + std::to_string(stats[i].length_histogram[b]);
              spdlog::info("{}: {} pairs, {} English / {} French types, per 10-token bucket: {}", names[i],
                           stats[i].pairs, stats[i].en_types, stats[i].fr_types, hist);
            }
            spdlog::info("wrote {}/{{train,valid,test}}.{{en,fr,align}} and the word-order probe {}/probe.{{en,fr,align}} "
                         "({} pairs of sentences that differ only in the order of two nouns)", *out, *out, kToyProbePairs);
            return 0;
          }};
}

}  // namespace attnmt::cli
