// What an evaluation measured, and its JSON form (run_dir/eval/<name>.json, report.json).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnmt {

struct BucketScore {
  int min = 0, max = 0;  // source length range in words (max = -1: no upper bound)
  int64_t count = 0;
  double bleu = 0;
};

struct EvalResult {
  double bleu = 0, chrf = 0;
  double bleu_lc = 0;   // BLEU of lowercased hypotheses and references (as much of the literature reports)
  double unk_rate = 0;  // share of the hypotheses' tokens that are <unk>
  std::string signature, chrf_signature, bleu_line;
  int beam_size = 1;
  double length_penalty = 0;  // GNMT α of the search
  int64_t sentences = 0;
  double decode_s = 0, sentences_per_s = 0;
  std::vector<BucketScore> by_length;
  std::optional<double> aer, attention_entropy;  // with gold alignments and an attention model
  std::optional<double> ppl;                     // teacher-forced perplexity on the references

  nlohmann::json to_json() const;
  // The inverse of to_json (every field round-trips); throws nlohmann::json::exception on a missing
  // required entry ("bleu", "by_length") or a wrong type.
  static EvalResult from_json(const nlohmann::json& j);
};

// Source-length buckets from the upper edges: [1, e0], [e0+1, e1], ..., [e_last+1, inf).
std::vector<BucketScore> make_buckets(const std::vector<int>& edges);

}  // namespace attnmt
