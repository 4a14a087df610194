// Fuzzes corpus BLEU and chrF: lines before the first TAB-only line are hypotheses, after it references.
#include <cmath>

#include "data/text.h"
#include "eval/bleu.h"
#include "eval/chrf.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string_view s(reinterpret_cast<const char*>(data), size);
  if (find_invalid_utf8(s) != std::string::npos) return 0;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    lines.emplace_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  std::vector<std::string> hyps, refs;
  for (size_t i = 0; i < lines.size(); ++i) (i % 2 ? refs : hyps).push_back(lines[i]);
  hyps.resize(refs.size());
  if (hyps.empty()) return 0;
  BleuScore b = corpus_bleu(hyps, {refs});
  fuzz::check(std::isfinite(b.score) && b.score >= 0 && b.score <= 100.0000001, "BLEU in [0, 100]");
  BleuScore lower = corpus_bleu(hyps, {refs}, BleuOptions{"none", true});
  fuzz::check(std::isfinite(lower.score) && lower.score >= 0 && lower.score <= 100.0000001, "lowercased BLEU in [0, 100]");
  ChrfScore c = corpus_chrf(hyps, {refs});
  fuzz::check(std::isfinite(c.score) && c.score >= 0 && c.score <= 100.0000001, "chrF in [0, 100]");
  return 0;
}
