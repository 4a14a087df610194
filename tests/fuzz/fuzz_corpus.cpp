// Fuzzes the corpus readers (line-aligned files and TSV) and tokenization with filtering.
#include "data/corpus.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnmt;
  std::string path = fuzz::scratch_file("corpus.txt");
  fuzz::write_bytes(path, data, size);
  try {
    ParallelText tsv = read_tsv(path);
    fuzz::check(tsv.src.size() == tsv.tgt.size(), "TSV sides have the same length");
    TokenizedCorpus c = tokenize_corpus(tsv, Tokenizer(TokenizerKind::k13a, true), 20);
    fuzz::check(c.stats.kept == static_cast<int64_t>(c.examples.size()), "kept count");
    fuzz::check(c.stats.read == c.stats.kept + c.stats.dropped_empty + c.stats.dropped_long, "filter counts add up");
    for (const auto& e : c.examples) fuzz::check(!e.src.empty() && e.src.size() <= 20, "kept lengths within limits");
  } catch (const UsageError&) {
  }
  try {
    ParallelText p = read_parallel(path, path);
    fuzz::check(p.src == p.tgt, "a file read twice gives the same lines");
    tokenize_corpus(p, Tokenizer(TokenizerKind::kSpace, false), 0);
  } catch (const UsageError&) {
  }
  return 0;
}
