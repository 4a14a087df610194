// Hard alignments from attention: which source token each target token is aligned to, and their Pharaoh text. The one
// code path for them: `translate --alignment hard`, serve's "align", and AER in `evaluate`, `attention` and the lab.
#pragma once
#include <string>
#include <vector>

#include "data/corpus.h"

namespace attnmt {

// weights[j][i]: attention of target token j on source token i. Returns the pairs (argmax_i, j), or with
// threshold > 0 every (i, j) whose weight exceeds it.
Alignment hard_alignment(const std::vector<std::vector<float>>& weights, double threshold = 0.0);

// Pharaoh text "i-j i-j ..." (source-target, 0-based), pairs sorted by target then source position.
std::string pharaoh(Alignment a);

}  // namespace attnmt
