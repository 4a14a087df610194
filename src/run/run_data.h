// A run's prepared data: the corpus of its config read, filtered and encoded, with its tokenizer and vocabularies.
// Training reads it once before the first step; the training snapshots and `bench` read it too.
#pragma once
#include <string>
#include <vector>

#include "common/config.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "data/vocab.h"

namespace attnmt {

struct RunData {
  Tokenizer tok;                        // the run's tokenizer
  std::string src_spm, tgt_spm;         // serialized SentencePiece models to write (a new sentencepiece run)
  Vocab src_vocab, tgt_vocab;
  std::vector<EncodedPair> train, valid;
  std::vector<std::string> valid_refs;  // raw reference lines of the kept validation pairs (lowercased when the run is)
};

// The corpus of cfg read, filtered and encoded; the vocabularies built, or loaded from run_dir (load_vocab, on resume);
// SentencePiece models trained or read for a new sentencepiece run.
RunData prepare_data(const Config& cfg, bool load_vocab);

}  // namespace attnmt
