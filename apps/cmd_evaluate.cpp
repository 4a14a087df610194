// attnmt evaluate --run DIR [--split test|valid] [--src F --ref F] [--align F] [--beam K] [--length-penalty A]
//                 [--checkpoint best|last|FILE]
#include <cstdio>

#include "commands.h"
#include "common/config.h"
#include "eval/evaluator.h"

namespace attnmt::cli {

Command setup_evaluate(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string run;                  // run directory
    EvalRequest req;                  // split or files, beam
    std::string checkpoint = "best";  // best | last
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("evaluate", "Decode a test set with a trained run; BLEU, chrF, BLEU by length, AER");
  app->add_option("--run,-r", opt->run, "Run directory (from attnmt train)")->required();
  app->add_option("--split", opt->req.split, "test | valid")->capture_default_str()->check(CLI::IsMember({"test", "valid"}));
  auto* src = app->add_option("--src", opt->req.src, "Source file (instead of the split's)");
  auto* ref = app->add_option("--ref", opt->req.ref, "Reference file (with --src)");
  src->needs(ref);
  ref->needs(src);
  app->add_option("--align", opt->req.align, "Gold alignments, Pharaoh format (default: the split's align file)");
  app->add_option("--beam", opt->req.beam, "Beam size (default: the run's " + config_key(defaults(), &defaults().eval.beam_size) + ")")->check(CLI::Range(1, 100));
  app->add_option("--length-penalty", opt->req.length_penalty, "GNMT length penalty alpha (default: the run's " +
                  config_key(defaults(), &defaults().eval.length_penalty) + ")")->check(CLI::Range(0.0, 5.0));
  app->add_option("--checkpoint", opt->checkpoint, "best | last | a checkpoint file of this run's model (e.g. from `attnmt average`)")->capture_default_str();
  return {app, [opt, &g]() -> int {
            LoadedRun run = load_run(opt->run, opt->checkpoint, g.device);
            EvalResult r = evaluate_run(run, opt->run, opt->req);
            std::printf("%s\n%s = %.2f\n", r.bleu_line.c_str(), r.chrf_signature.c_str(), r.chrf);
            std::printf("lowercased BLEU = %.2f, <unk> in the hypotheses: %.2f%% of tokens\n", r.bleu_lc, 100.0 * r.unk_rate);
            std::printf("%-12s %8s %8s\n", "src words", "count", "BLEU");
            for (const auto& b : r.by_length) {
              std::string range = std::to_string(b.min) + "-" + (b.max < 0 ? std::string("") : std::to_string(b.max));
              std::printf("%-12s %8lld %8.2f\n", range.c_str(), static_cast<long long>(b.count), b.bleu);
            }
            std::printf("beam %d (length penalty %.2f), %lld sentences in %.1f s (%.1f sentences/s)", r.beam_size, r.length_penalty,
                        static_cast<long long>(r.sentences), r.decode_s, r.sentences_per_s);
            if (r.ppl) std::printf(", perplexity %.2f", *r.ppl);
            if (r.aer) std::printf(", AER %.3f, attention entropy %.3f", *r.aer, *r.attention_entropy);
            std::printf("\nmodel: %s\n", describe_model(run.cfg.model).c_str());
            return 0;
          }};
}

}  // namespace attnmt::cli
