#include "eval/bleu.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "data/text.h"

namespace attnmt {

void BleuStats::add(const BleuStats& o) {
  for (size_t n = 0; n < 4; ++n) {
    matches[n] += o.matches[n];
    totals[n] += o.totals[n];
  }
  sys_len += o.sys_len;
  ref_len += o.ref_len;
}

namespace {
using NgramCounts = std::map<std::vector<std::string>, int64_t>;
NgramCounts ngrams(const std::vector<std::string>& t, size_t n) {
  NgramCounts c;
  for (size_t i = 0; i + n <= t.size(); ++i) ++c[std::vector<std::string>(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(i + n))];
  return c;
}
}  // namespace

BleuStats sentence_stats(const std::vector<std::string>& hyp, const std::vector<std::vector<std::string>>& refs) {
  BleuStats s;
  s.sys_len = static_cast<int64_t>(hyp.size());
  // Closest reference length; on a tie the shorter one.
  int64_t best = -1;
  for (const auto& r : refs) {
    auto len = static_cast<int64_t>(r.size());
    if (best < 0 || std::llabs(len - s.sys_len) < std::llabs(best - s.sys_len) ||
        (std::llabs(len - s.sys_len) == std::llabs(best - s.sys_len) && len < best))
      best = len;
  }
  s.ref_len = std::max<int64_t>(best, 0);
  for (size_t n = 1; n <= 4; ++n) {
    NgramCounts h = ngrams(hyp, n);
    NgramCounts max_ref;
    for (const auto& r : refs)
      for (const auto& [g, c] : ngrams(r, n)) max_ref[g] = std::max(max_ref[g], c);
    int64_t m = 0;
    for (const auto& [g, c] : h) {
      auto it = max_ref.find(g);
      if (it != max_ref.end()) m += std::min(c, it->second);
    }
    s.matches[n - 1] = m;
    s.totals[n - 1] = std::max<int64_t>(0, s.sys_len - static_cast<int64_t>(n) + 1);
  }
  return s;
}

BleuScore bleu_from_stats(const BleuStats& s) {
  BleuScore b;
  b.sys_len = s.sys_len;
  b.ref_len = s.ref_len;
  double smooth = 1.0;
  for (size_t n = 0; n < 4; ++n) {
    if (s.totals[n] == 0) break;  // no n-grams of this order: precision stays 0
    if (s.matches[n] == 0) {
      smooth *= 2;  // "exp": 1/2^k for the k-th order without matches
      b.precisions[n] = 100.0 / (smooth * static_cast<double>(s.totals[n]));
    } else {
      b.precisions[n] = 100.0 * static_cast<double>(s.matches[n]) / static_cast<double>(s.totals[n]);
    }
  }
  if (s.sys_len < s.ref_len)
    b.bp = s.sys_len > 0 ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.sys_len)) : 0.0;
  else
    b.bp = 1.0;
  b.ratio = s.ref_len > 0 ? static_cast<double>(s.sys_len) / static_cast<double>(s.ref_len) : 0.0;
  double log_sum = 0;
  for (double p : b.precisions) log_sum += p > 0 ? std::log(p) : -9999999999.0;
  b.score = b.bp * std::exp(log_sum / 4.0);
  return b;
}

std::string BleuScore::format() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), " = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                score, precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio,
                static_cast<long long>(sys_len), static_cast<long long>(ref_len));
  return signature + buf;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& opt) {
  if (refs.empty()) throw std::invalid_argument("BLEU needs at least one reference stream");
  for (const auto& r : refs)
    if (r.size() != hyps.size())
      throw std::invalid_argument("BLEU: " + std::to_string(hyps.size()) + " hypotheses but a reference stream has " +
                                  std::to_string(r.size()) + " lines");
  auto tok = [&](const std::string& s) {
    std::string x = opt.lowercase ? to_lower_utf8(s) : s;
    return opt.tokenize == "13a" ? split_whitespace(tokenize_13a_string(x)) : split_whitespace(x);
  };
  BleuStats total;
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::vector<std::vector<std::string>> rs;
    rs.reserve(refs.size());
    for (const auto& r : refs) rs.push_back(tok(r[i]));
    total.add(sentence_stats(tok(hyps[i]), rs));
  }
  BleuScore b = bleu_from_stats(total);
  b.signature = "BLEU|nrefs:" + std::to_string(refs.size()) + "|case:" + (opt.lowercase ? "lc" : "mixed") +
                "|eff:no|tok:" + opt.tokenize + "|smooth:exp|version:attnmt-" + ATTNMT_VERSION;
  return b;
}

}  // namespace attnmt
