// Evaluating a loaded run on a test set: BLEU, chrF, BLEU by source length, decoding speed, perplexity, and (with gold
// alignments) AER and attention entropy. Translation itself is translate/translator.h.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "data/corpus.h"
#include "run/loaded_run.h"
#include "run/result.h"
#include "translate/search.h"

namespace attnmt {

// Translates srcs, scores against refs; with aligns (one per sentence), also AER/entropy by forcing
// the reference through the model.
EvalResult evaluate_sentences(LoadedRun& run, const std::vector<std::string>& srcs,
                              const std::vector<std::string>& refs, const std::vector<Alignment>* aligns,
                              const SearchOptions& opt, std::vector<std::string>* hyps_out = nullptr);

struct EvalRequest {
  std::string split = "test";   // test | valid: files from the run's config
  std::string src, ref, align;  // explicit files instead (align may be given with a split too)
  int beam = 0;                 // 0 = the config's eval.beam_size
  double length_penalty = -1;   // < 0: the config's eval.length_penalty
};

// Decodes the requested files with a loaded run, writes run_dir/eval/<name>.hyp and <name>.json
// (name = split, or "custom" for explicit files) and returns the result.
EvalResult evaluate_run(LoadedRun& run, const std::string& run_dir, const EvalRequest& req);

}  // namespace attnmt
