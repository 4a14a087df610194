#include "eval/chrf.h"

#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "data/text.h"

namespace attnmt {

void ChrfStats::add(const ChrfStats& o) {
  for (size_t i = 0; i < v.size(); ++i) v[i] += o.v[i];
}

namespace {
// Code points of s (as UTF-8 substrings) with whitespace removed.
std::vector<std::string> chars_without_space(const std::string& s) {
  std::vector<std::string> out;
  for (const auto& tok : split_whitespace(s)) {
    size_t i = 0;
    while (i < tok.size()) {
      auto c = static_cast<unsigned char>(tok[i]);
      size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      len = std::min(len, tok.size() - i);
      out.push_back(tok.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::unordered_map<std::string, int64_t> char_ngrams(const std::vector<std::string>& chars, size_t n) {
  std::unordered_map<std::string, int64_t> c;
  for (size_t i = 0; i + n <= chars.size(); ++i) {
    std::string g;
    for (size_t k = 0; k < n; ++k) g += chars[i + k];
    ++c[g];
  }
  return c;
}
}  // namespace

ChrfStats chrf_sentence_stats(const std::string& hyp, const std::string& ref) {
  ChrfStats s;
  auto hc = chars_without_space(hyp), rc = chars_without_space(ref);
  for (size_t n = 1; n <= static_cast<size_t>(ChrfStats::kOrder); ++n) {
    auto h = char_ngrams(hc, n), r = char_ngrams(rc, n);
    int64_t nh = 0, nr = 0, m = 0;
    for (const auto& [g, c] : h) {
      nh += c;
      auto it = r.find(g);
      if (it != r.end()) m += std::min(c, it->second);
    }
    for (const auto& [g, c] : r) nr += c;
    s.v[3 * (n - 1)] = nh;
    s.v[3 * (n - 1) + 1] = nr;
    s.v[3 * (n - 1) + 2] = m;
  }
  return s;
}

double chrf_from_stats(const ChrfStats& s, double beta) {
  const double factor = beta * beta;
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (int i = 0; i < ChrfStats::kOrder; ++i) {
    auto nh = s.v[static_cast<size_t>(3 * i)], nr = s.v[static_cast<size_t>(3 * i + 1)], m = s.v[static_cast<size_t>(3 * i + 2)];
    if (nh > 0 && nr > 0) {
      avg_prec += static_cast<double>(m) / static_cast<double>(nh);
      avg_rec += static_cast<double>(m) / static_cast<double>(nr);
      ++effective;
    }
  }
  if (effective == 0) return 0.0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec <= 0) return 0.0;
  return 100.0 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

std::string ChrfScore::format() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), " = %.2f", score);
  return signature + buf;
}

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      bool lowercase) {
  if (refs.empty()) throw std::invalid_argument("chrF needs at least one reference stream");
  for (const auto& r : refs)
    if (r.size() != hyps.size())
      throw std::invalid_argument("chrF: " + std::to_string(hyps.size()) + " hypotheses but a reference stream has " +
                                  std::to_string(r.size()) + " lines");
  ChrfStats total;
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::string h = lowercase ? to_lower_utf8(hyps[i]) : hyps[i];
    ChrfStats best;
    double best_score = -1;
    for (const auto& r : refs) {
      ChrfStats st = chrf_sentence_stats(h, lowercase ? to_lower_utf8(r[i]) : r[i]);
      double sc = chrf_from_stats(st);
      if (sc > best_score) {
        best_score = sc;
        best = st;
      }
    }
    total.add(best);
  }
  ChrfScore c;
  c.score = chrf_from_stats(total);
  c.signature = "chrF2|nrefs:" + std::to_string(refs.size()) + "|case:" + (lowercase ? "lc" : "mixed") +
                "|eff:yes|nc:6|nw:0|space:no|version:attnmt-" + ATTNMT_VERSION;
  return c;
}

}  // namespace attnmt
