#include "eval/aer.h"

#include <cmath>
#include <algorithm>
#include <set>
#include <string>

namespace attnmt {

double AerCounts::aer() const {
  if (hyp + gold == 0) return 0.0;
  return 1.0 - 2.0 * static_cast<double>(both) / static_cast<double>(hyp + gold);
}

AerCounts aer_counts(const Alignment& hyp, const Alignment& gold) {
  std::set<std::pair<int, int>> h(hyp.begin(), hyp.end()), g(gold.begin(), gold.end());
  AerCounts c;
  c.hyp = static_cast<int64_t>(h.size());
  c.gold = static_cast<int64_t>(g.size());
  for (const auto& p : h) c.both += g.count(p) ? 1 : 0;
  return c;
}

double mean_entropy(const std::vector<std::vector<float>>& weights) {
  if (weights.empty()) return 0.0;
  double total = 0;
  for (const auto& row : weights) {
    double e = 0;
    for (float p : row)
      if (p > 0) e -= static_cast<double>(p) * std::log(static_cast<double>(p));
    total += e;
  }
  return total / static_cast<double>(weights.size());
}

}  // namespace attnmt
