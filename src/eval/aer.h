// Alignment quality of attention: AER of hard alignments (translate/alignment.h) against gold Pharaoh alignments (all
// gold links sure), and attention entropy. Plain functions, no torch.
#pragma once
#include <vector>

#include "data/corpus.h"

namespace attnmt {

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
