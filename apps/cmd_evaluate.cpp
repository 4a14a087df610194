// attnmt evaluate --run DIR [--split test|valid] [--src F --ref F] [--align F] [--beam K] [--checkpoint best|last]
#include <cstdio>
#include <iostream>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/errors.h"
#include "common/fs.h"
#include "eval/evaluator.h"

namespace attnmt::cli {

Command setup_evaluate(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string run;                  // run directory
    std::string split = "test";       // test | valid (files from the run's config)
    std::string src, ref, align;      // explicit files instead of the split
    int beam = 0;                     // 0 = the config's eval.beam_size
    std::string checkpoint = "best";  // best | last
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("evaluate", "Decode a test set with a trained run; BLEU, chrF, BLEU by length, AER");
  app->add_option("--run,-r", opt->run, "Run directory (from attnmt train)")->required();
  app->add_option("--split", opt->split, "test | valid")->capture_default_str()->check(CLI::IsMember({"test", "valid"}));
  auto* src = app->add_option("--src", opt->src, "Source file (instead of the split's)");
  auto* ref = app->add_option("--ref", opt->ref, "Reference file (with --src)");
  src->needs(ref);
  ref->needs(src);
  app->add_option("--align", opt->align, "Gold alignments, Pharaoh format (default: data.test.align for the test split)");
  app->add_option("--beam", opt->beam, "Beam size (default: eval.beam_size)")->check(CLI::Range(1, 100));
  app->add_option("--checkpoint", opt->checkpoint, "best | last")->capture_default_str()->check(CLI::IsMember({"best", "last"}));
  return {app, [opt, &g]() -> int {
            LoadedRun run = load_run(opt->run, opt->checkpoint, g.device);
            std::string src = opt->src, ref = opt->ref, align = opt->align;
            std::string name = opt->src.empty() ? opt->split : "custom";
            if (src.empty()) {
              const SplitConfig& s = opt->split == "test" ? run.cfg.data.test : run.cfg.data.valid;
              if (!s.tsv.empty()) throw UsageError("evaluate: TSV splits are not supported yet; pass --src and --ref");
              if (s.src.empty()) throw UsageError("data." + opt->split + ": the run's config names no files; pass --src and --ref");
              src = s.src;
              ref = s.tgt;
              if (align.empty()) align = s.align;
            }
            std::vector<std::string> srcs = read_lines(src), refs = read_lines(ref);
            if (srcs.size() != refs.size())
              throw UsageError("line counts differ: " + src + " has " + std::to_string(srcs.size()) + " lines, " + ref +
                               " has " + std::to_string(refs.size()));
            std::vector<Alignment> aligns;
            if (!align.empty()) {
              std::vector<size_t> sl, tl;
              for (size_t i = 0; i < srcs.size(); ++i) {
                sl.push_back(tokenize(srcs[i], run.kind, run.cfg.data.lowercase).size());
                tl.push_back(tokenize(refs[i], run.kind, run.cfg.data.lowercase).size());
              }
              aligns = read_alignments(align, &sl, &tl);
            }
            SearchOptions so;
            so.beam_size = opt->beam > 0 ? opt->beam : run.cfg.eval.beam_size;
            so.length_penalty = run.cfg.eval.length_penalty;
            so.max_len_ratio = run.cfg.eval.max_len_ratio;
            std::vector<std::string> hyps;
            EvalResult r = evaluate_sentences(run, srcs, refs, align.empty() ? nullptr : &aligns, so, &hyps);
            std::string dir = opt->run + "/eval";
            make_dirs(dir);
            std::string text;
            for (const auto& h : hyps) text += h + "\n";
            write_file_atomic(dir + "/" + name + ".hyp", text);
            write_file_atomic(dir + "/" + name + ".json", r.to_json().dump(2) + "\n");
            std::printf("%s\n%s = %.2f\n", r.bleu_line.c_str(), r.chrf_signature.c_str(), r.chrf);
            std::printf("%-12s %8s %8s\n", "src length", "count", "BLEU");
            for (const auto& b : r.by_length) {
              std::string range = std::to_string(b.min) + "-" + (b.max < 0 ? std::string("") : std::to_string(b.max));
              std::printf("%-12s %8lld %8.2f\n", range.c_str(), static_cast<long long>(b.count), b.bleu);
            }
            std::printf("beam %d, %lld sentences in %.1f s (%.1f sentences/s)", r.beam_size,
                        static_cast<long long>(r.sentences), r.decode_s, r.sentences_per_s);
            if (r.ppl) std::printf(", perplexity %.2f", *r.ppl);
            if (r.aer) std::printf(", AER %.3f, attention entropy %.3f", *r.aer, *r.attention_entropy);
            std::printf("\n");
            if (!align.empty() && !r.aer) std::printf("no AER: the model has no attention\n");
            spdlog::info("wrote {}/{}.hyp and {}/{}.json", dir, name, dir, name);
            return 0;
          }};
}

}  // namespace attnmt::cli
