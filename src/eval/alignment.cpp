#include "eval/alignment.h"

#include <cmath>
#include <algorithm>
#include <set>
#include <string>

namespace attnmt {

Alignment hard_alignment(const std::vector<std::vector<float>>& weights, double threshold) {
  Alignment a;
  for (size_t j = 0; j < weights.size(); ++j) {
    const auto& row = weights[j];
    if (row.empty()) continue;
    if (threshold > 0) {
      for (size_t i = 0; i < row.size(); ++i)
        if (static_cast<double>(row[i]) > threshold) a.emplace_back(static_cast<int>(i), static_cast<int>(j));
      continue;
    }
    size_t best = static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
    a.emplace_back(static_cast<int>(best), static_cast<int>(j));
  }
  return a;
}

std::string pharaoh(Alignment a) {
  std::sort(a.begin(), a.end(), [](const auto& x, const auto& y) { return x.second != y.second ? x.second < y.second : x.first < y.first; });
  std::string out;
  for (const auto& [i, j] : a) out += (out.empty() ? "" : " ") + std::to_string(i) + "-" + std::to_string(j);
  return out;
}

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
