// attnmt bleu --hyp FILE --ref FILE [--ref FILE2 ...] [--tokenize 13a|none] [--lowercase] [--metrics bleu,chrf] [--json]
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/errors.h"
#include "data/corpus.h"
#include "data/text.h"
#include "eval/bleu.h"
#include "eval/chrf.h"

namespace attnmt::cli {

Command setup_bleu(CLI::App& parent, const GlobalOptions&) {
  struct Options {
    std::string hyp;                 // hypothesis file, one sentence per line
    std::vector<std::string> refs;   // reference files
    std::string tokenize = "13a";    // 13a | none
    bool lowercase = false;          // case-insensitive
    std::string metrics = "bleu";    // comma-separated: bleu, chrf
    bool json = false;               // machine-readable output
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("bleu", "Score a hypothesis file against references (sacreBLEU-compatible BLEU, chrF)");
  app->add_option("--hyp", opt->hyp, "Hypothesis file")->required();
  app->add_option("--ref", opt->refs, "Reference file (repeat for several references)")->required();
  app->add_option("--tokenize", opt->tokenize, "13a | none")->capture_default_str()->check(CLI::IsMember({"13a", "none"}));
  app->add_flag("--lowercase,-l", opt->lowercase, "Lowercase hypotheses and references");
  app->add_option("--metrics,-m", opt->metrics, "Comma-separated: bleu, chrf")->capture_default_str();
  app->add_flag("--json", opt->json, "Print JSON");
  return {app, [opt]() -> int {
            bool want_bleu = false, want_chrf = false;
            for (const auto& m : split_whitespace([&] {
                   std::string s = opt->metrics;
                   std::replace(s.begin(), s.end(), ',', ' ');
                   return s;
                 }())) {
              if (m == "bleu") want_bleu = true;
              else if (m == "chrf") want_chrf = true;
              else throw UsageError("--metrics: unknown metric '" + m + "'. Valid options: bleu, chrf");
            }
            if (!want_bleu && !want_chrf) throw UsageError("--metrics: name at least one metric (bleu, chrf)");
            std::vector<std::string> hyps = read_lines(opt->hyp);
            std::vector<std::vector<std::string>> refs;
            for (const auto& f : opt->refs) {
              refs.push_back(read_lines(f));
              check_same_line_count(opt->hyp, hyps.size(), f, refs.back().size());
            }
            nlohmann::json j = nlohmann::json::object();
            if (want_bleu) {
              BleuOptions bo;
              bo.tokenize = opt->tokenize;
              bo.lowercase = opt->lowercase;
              BleuScore b = corpus_bleu(hyps, refs, bo);
              if (opt->json) {
                j["score"] = b.score;
                j["precisions"] = b.precisions;
                j["bp"] = b.bp;
                j["ratio"] = b.ratio;
                j["sys_len"] = b.sys_len;
                j["ref_len"] = b.ref_len;
                j["signature"] = b.signature;
              } else {
                std::cout << b.format() << "\n";
              }
            }
            if (want_chrf) {
              ChrfScore c = corpus_chrf(hyps, refs, opt->lowercase);
              if (opt->json) {
                j["chrf"] = c.score;
                j["chrf_signature"] = c.signature;
              } else {
                std::cout << c.format() << "\n";
              }
            }
            if (opt->json) std::cout << j.dump(2) << "\n";
            return 0;
          }};
}

}  // namespace attnmt::cli
