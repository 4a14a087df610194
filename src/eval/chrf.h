// chrF as sacreBLEU 2.x computes it by default (chrF2): character n-grams of orders 1..6 over Unicode
// code points with whitespace removed, statistics summed over the corpus, precision and recall
// averaged over the orders that have n-grams on both sides, then F-beta with beta = 2. With several
// references, each sentence uses the reference with the best sentence-level score.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace attnmt {

struct ChrfStats {
  static constexpr int kOrder = 6;
  std::array<int64_t, 3 * kOrder> v{};  // per order: hypothesis n-grams, reference n-grams, matches
  void add(const ChrfStats& o);
};

ChrfStats chrf_sentence_stats(const std::string& hyp, const std::string& ref);
double chrf_from_stats(const ChrfStats& s, double beta = 2.0);  // 0..100

struct ChrfScore {
  double score = 0;
  std::string signature;  // chrF2|nrefs:N|case:mixed|eff:yes|nc:6|nw:0|space:no|version:...
  std::string format() const;
};

// refs[k][i] is reference k of sentence i (std::invalid_argument on count mismatch).
ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      bool lowercase = false);

}  // namespace attnmt
