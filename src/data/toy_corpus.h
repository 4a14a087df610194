// The shipped English->French corpus: generated from a small grammar with real words and real
// phenomena (post-nominal adjectives that cross alignments, gender/number agreement, verb
// agreement, relative clauses with qui/que, prepositional phrases, clause coordination), with the
// gold word alignment of every pair. The French side is a function of the English side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace attnmt {

struct ToyCorpusOptions {
  uint64_t seed = 1;    // generator seed
  int train = 10000;    // training pairs
  int valid = 600;      // validation pairs
  int test = 720;       // test pairs
  int min_len = 4;      // shortest English sentence (tokens)
  int max_len = 60;     // longest English sentence (tokens)
  int bucket_width = 10;  // lengths are spread evenly over buckets of this width
};

struct ToyPair {
  std::vector<std::string> en;
  std::vector<std::string> fr;
  Alignment align;  // (en index, fr index), every French token covered
};

// Generates n pairs whose English lengths are spread evenly over the buckets of
// [min_len, max_len]. Deterministic in (seed, stream).
std::vector<ToyPair> generate_toy_pairs(int n, const ToyCorpusOptions& opt, uint64_t stream);

struct ToyCorpusStats {
  int64_t pairs = 0;
  std::vector<int64_t> length_histogram;  // per bucket of bucket_width English tokens
  int64_t en_types = 0, fr_types = 0;
};

// Writes DIR/{train,valid,test}.{en,fr,align} and the word-order probe DIR/probe.{en,fr,align}; returns per-split statistics (train, valid, test).
std::vector<ToyCorpusStats> write_toy_corpus(const std::string& dir, const ToyCorpusOptions& opt);

// The word-order probe: n pairs of sentences that differ only in the order of two nouns ("the dog sees the cat ."
// and "the cat sees the dog ."), each with its reference: two people or animals of the same number, a transitive verb,
// `the` before each. A model that cannot see word order translates both sentences of a pair alike.
std::vector<std::pair<ToyPair, ToyPair>> toy_word_order_probe(int n, uint64_t seed);
constexpr int kToyProbePairs = 100;  // pairs `corpus` writes to probe.{en,fr,align}

// True for a French content word of the grammar (a noun, adjective, verb or adverb form); false for its function
// words (articles, prepositions, qui/que, et, punctuation) and anything outside it.
bool toy_content_word_fr(const std::string& w);

// Lexicon sizes, for the data README.
int toy_lexicon_size();

}  // namespace attnmt
