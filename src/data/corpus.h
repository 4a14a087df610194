// Parallel corpora: readers for line-aligned plain text and TSV, tokenization, filtering, alignments.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "data/text.h"
#include "data/tokenizer.h"

namespace attnmt {

// Raw sentence pairs as read from disk (CRLF stripped, UTF-8 checked).
struct ParallelText {
  std::vector<std::string> src;
  std::vector<std::string> tgt;
  std::string origin;  // file name(s), for messages
};

// Throws UsageError "line counts differ: A has N lines, B has M" unless the two counts are equal.
void check_same_line_count(const std::string& a, size_t a_lines, const std::string& b, size_t b_lines);

// Line i of src <-> line i of tgt. Throws UsageError on different line counts (giving both).
ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path);
// "src<TAB>tgt[<TAB>anything]"; throws UsageError naming the line without a tab.
ParallelText read_tsv(const std::string& path);
// Reads whichever form the split config gives; throws UsageError when the split has no data.
ParallelText read_split(const SplitConfig& split, const std::string& path);

struct Example {
  std::vector<std::string> src;  // source tokens
  std::vector<std::string> tgt;  // target tokens
  int64_t line = 0;              // 0-based line in the original files
};

struct FilterStats {
  int64_t read = 0;           // pairs read
  int64_t kept = 0;           // pairs kept
  int64_t dropped_empty = 0;  // pairs with an empty side
  int64_t dropped_long = 0;   // pairs with a side longer than max_len tokens
};

struct TokenizedCorpus {
  std::vector<Example> examples;
  FilterStats stats;
};

// Tokenizes into model tokens; when max_len > 0, drops empty pairs and pairs longer than max_len
// tokens (pieces, for SentencePiece) and counts them. Throws UsageError naming the origin when nothing is left.
TokenizedCorpus tokenize_corpus(const ParallelText& text, const Tokenizer& tok, int max_len);

// Pharaoh alignments "i-j i-j ..." (0-based source-target), one line per sentence pair.
using Alignment = std::vector<std::pair<int, int>>;
// Parses one line; throws UsageError with `where` in the message on malformed pairs.
Alignment parse_pharaoh(const std::string& line, const std::string& where);
std::string format_pharaoh(const Alignment& a);
// Reads a file; when src_lens/tgt_lens are given, checks the index ranges, and the line count:
// equal to the corpus, or (prefix = true) at least as many lines, of which the first ones are used.
std::vector<Alignment> read_alignments(const std::string& path, const std::vector<size_t>* src_lens = nullptr,
                                       const std::vector<size_t>* tgt_lens = nullptr, bool prefix = false);

}  // namespace attnmt
