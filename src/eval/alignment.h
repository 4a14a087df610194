// Alignment quality of attention: hard alignments (argmax source per target token), AER against gold
// Pharaoh alignments (all gold links sure), attention entropy. Plain functions, no torch.
#pragma once
#include <vector>

#include "data/corpus.h"

namespace attnmt {

// weights[j][i]: attention of target token j on source token i. Returns the pairs (argmax_i, j), or with
// threshold > 0 every (i, j) whose weight exceeds it. The one code path for hard alignments: AER in
// `evaluate` and `attention`, and `translate --alignment hard`.
Alignment hard_alignment(const std::vector<std::vector<float>>& weights, double threshold = 0.0);

// Pharaoh text "i-j i-j ..." (source-target, 0-based), pairs sorted by target then source position.
std::string pharaoh(Alignment a);

// |A n G| counts for one sentence, used to sum over a corpus.
struct AerCounts {
  int64_t hyp = 0, gold = 0, both = 0;
  void add(const AerCounts& o) { hyp += o.hyp; gold += o.gold; both += o.both; }
  double aer() const;  // 1 - 2|A n G| / (|A| + |G|); 0 when both are empty
};
AerCounts aer_counts(const Alignment& hyp, const Alignment& gold);

// Mean entropy (nats) of the attention rows.
double mean_entropy(const std::vector<std::vector<float>>& weights);

}  // namespace attnmt
