#include "data/corpus.h"

#include <charconv>

#include <spdlog/spdlog.h>

#include "common/errors.h"

namespace attnmt {

void check_same_line_count(const std::string& a, size_t a_lines, const std::string& b, size_t b_lines) {
  if (a_lines != b_lines)
    throw UsageError("line counts differ: " + a + " has " + std::to_string(a_lines) + " lines, " + b + " has " +
                     std::to_string(b_lines));
}

ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path) {
  ParallelText p;
  p.src = read_lines(src_path);
  p.tgt = read_lines(tgt_path);
  p.origin = src_path + " / " + tgt_path;
  check_same_line_count(src_path, p.src.size(), tgt_path, p.tgt.size());
  return p;
}

ParallelText read_tsv(const std::string& path) {
  ParallelText p;
  p.origin = path;
  std::vector<std::string> lines = read_lines(path);
  p.src.reserve(lines.size());
  p.tgt.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) {  // an empty line is an empty pair (dropped and counted later)
      p.src.emplace_back();
      p.tgt.emplace_back();
      continue;
    }
    size_t tab = l.find('\t');
    if (tab == std::string::npos) throw UsageError(path + ":" + std::to_string(i + 1) + ": no tab (expected src<TAB>tgt)");
    size_t tab2 = l.find('\t', tab + 1);
    p.src.push_back(l.substr(0, tab));
    p.tgt.push_back(l.substr(tab + 1, tab2 == std::string::npos ? std::string::npos : tab2 - tab - 1));
  }
  return p;
}

ParallelText read_split(const SplitConfig& split, const std::string& path) {
  if (!split.tsv.empty()) return read_tsv(split.tsv);
  if (!split.src.empty() && !split.tgt.empty()) return read_parallel(split.src, split.tgt);
  throw UsageError(path + ": no files given (set src and tgt, or tsv)");
}

TokenizedCorpus tokenize_corpus(const ParallelText& text, const Tokenizer& tok, int max_len) {
  TokenizedCorpus out;
  out.stats.read = static_cast<int64_t>(text.src.size());
  out.examples.reserve(text.src.size());
  for (size_t i = 0; i < text.src.size(); ++i) {
    Example e;
    e.src = tok.encode(text.src[i], Side::kSource);
    e.tgt = tok.encode(text.tgt[i], Side::kTarget);
    e.line = static_cast<int64_t>(i);
    if (max_len > 0) {
      if (e.src.empty() || e.tgt.empty()) {
        ++out.stats.dropped_empty;
        continue;
      }
      if (static_cast<int>(e.src.size()) > max_len || static_cast<int>(e.tgt.size()) > max_len) {
        ++out.stats.dropped_long;
        continue;
      }
    }
    out.examples.push_back(std::move(e));
  }
  out.stats.kept = static_cast<int64_t>(out.examples.size());
  if (out.examples.empty())
    throw UsageError(text.origin + ": no sentence pairs left (" + std::to_string(out.stats.read) + " read, " +
                     std::to_string(out.stats.dropped_empty) + " empty, " + std::to_string(out.stats.dropped_long) +
                     " longer than max_len " + std::to_string(max_len) + ")");
  return out;
}

Alignment parse_pharaoh(const std::string& line, const std::string& where) {
  Alignment a;
  for (const auto& tok : split_whitespace(line)) {
    size_t dash = tok.find('-');
    auto bad = [&]() { throw UsageError(where + ": malformed alignment pair '" + tok + "' (expected i-j)"); };
    if (dash == std::string::npos || dash == 0 || dash + 1 == tok.size()) bad();
    int i = 0, j = 0;
    auto r1 = std::from_chars(tok.data(), tok.data() + dash, i);
    auto r2 = std::from_chars(tok.data() + dash + 1, tok.data() + tok.size(), j);
    if (r1.ec != std::errc() || r1.ptr != tok.data() + dash || r2.ec != std::errc() ||
        r2.ptr != tok.data() + tok.size() || i < 0 || j < 0)
      bad();
    a.emplace_back(i, j);
  }
  return a;
}

std::string format_pharaoh(const Alignment& a) {
  std::string s;
  for (size_t k = 0; k < a.size(); ++k) {
    if (k) s.push_back(' ');
    s += std::to_string(a[k].first) + "-" + std::to_string(a[k].second);
  }
  return s;
}

std::vector<Alignment> read_alignments(const std::string& path, const std::vector<size_t>* src_lens,
                                       const std::vector<size_t>* tgt_lens, bool prefix) {
  std::vector<std::string> lines = read_lines(path);
  if (src_lens && (prefix ? lines.size() < src_lens->size() : lines.size() != src_lens->size()))
    throw UsageError(path + ": has " + std::to_string(lines.size()) + " lines, the corpus has " +
                     std::to_string(src_lens->size()));
  if (src_lens && prefix) lines.resize(src_lens->size());
  std::vector<Alignment> out;
  out.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string where = path + ":" + std::to_string(i + 1);
    Alignment a = parse_pharaoh(lines[i], where);
    for (const auto& [s, t] : a) {
      if (src_lens && static_cast<size_t>(s) >= (*src_lens)[i])
        throw UsageError(where + ": source index " + std::to_string(s) + " out of range (sentence has " +
                         std::to_string((*src_lens)[i]) + " tokens)");
      if (tgt_lens && static_cast<size_t>(t) >= (*tgt_lens)[i])
        throw UsageError(where + ": target index " + std::to_string(t) + " out of range (sentence has " +
                         std::to_string((*tgt_lens)[i]) + " tokens)");
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace attnmt
