// Corpus BLEU as sacreBLEU 2.x computes it by default: 13a tokenization, n-grams up to 4, clipped
// counts against the maximum over references, brevity penalty with the closest reference length
// (ties go to the shorter), "exp" smoothing. Plain functions over strings: no torch.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace attnmt {

struct BleuOptions {
  std::string tokenize = "13a";  // 13a | none
  bool lowercase = false;        // lowercase hypotheses and references first
};

struct BleuStats {
  std::array<int64_t, 4> matches{};  // clipped n-gram matches, n = 1..4
  std::array<int64_t, 4> totals{};   // hypothesis n-grams, n = 1..4
  int64_t sys_len = 0;               // hypothesis tokens
  int64_t ref_len = 0;               // closest reference tokens
  void add(const BleuStats& o);
};

struct BleuScore {
  double score = 0;                  // 0..100
  std::array<double, 4> precisions{};  // percentages, smoothed as sacreBLEU reports them
  double bp = 0;                     // brevity penalty
  double ratio = 0;                  // sys_len / ref_len
  int64_t sys_len = 0, ref_len = 0;
  std::string signature;             // e.g. BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...
  std::string format() const;        // sacreBLEU's one-line format
};

// Statistics of one hypothesis against its references (already tokenized).
BleuStats sentence_stats(const std::vector<std::string>& hyp, const std::vector<std::vector<std::string>>& refs);
BleuScore bleu_from_stats(const BleuStats& s);

// refs[k][i] is reference k of sentence i; every refs[k] must have hyps.size() entries
// (std::invalid_argument otherwise).
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& opt = {});

}  // namespace attnmt
