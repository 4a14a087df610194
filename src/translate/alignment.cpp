#include "translate/alignment.h"

#include <algorithm>
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

}  // namespace attnmt
