// The run's tokenizer: what turns a raw line into the tokens a model reads and writes, and back.
// Word-level (space, 13a) or subword pieces (SentencePiece); the piece case also knows which word each
// piece belongs to, so that attention maps and alignments can be shown and scored per word.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "data/text.h"

namespace attnmt {

class SpmServer;  // the SentencePiece helper process (tokenizer.cpp)

enum class Side { kSource, kTarget };

// SentencePiece's word-start marker U+2581 (the pieces show it; decoded text never does).
inline constexpr std::string_view kWordStart = "\xE2\x96\x81";

class Tokenizer {
 public:
  Tokenizer();  // 13a, cased
  Tokenizer(TokenizerKind kind, bool lowercase);
  // Pieces from two serialized SentencePiece models (the same one twice for a joint model), loaded by
  // one helper process. Throws UsageError for a model the helper refuses, naming it by src_name or
  // tgt_name (its file) when given.
  static Tokenizer pieces(const std::string& src_model_bytes, const std::string& tgt_model_bytes, bool lowercase,
                          const std::string& src_name = "", const std::string& tgt_name = "");
  // The tokenizer a config names; for sentencepiece, with the models in the two files (a run's own
  // copies). Throws UsageError naming a missing or corrupt file.
  static Tokenizer from_config(const DataConfig& data, const std::string& src_model, const std::string& tgt_model);

  bool subword() const { return spm_ != nullptr; }
  bool lowercase() const { return lowercase_; }
  // The tokens the model reads (source) or writes (target).
  std::vector<std::string> encode(std::string_view line, Side side) const;
  // Plain text from model tokens; "<unk>" stays visible.
  std::string decode(const std::vector<std::string>& tokens, Side side) const;
  // Word-level tokens of a line: what gold alignments and length buckets count. The tokens themselves
  // for word-level tokenizers; for pieces, the whitespace-separated words of the (lowercased) line.
  std::vector<std::string> words(std::string_view line) const;
  // For each model token, the index of the word it belongs to (identity for word-level tokenizers;
  // for pieces, a new word starts at each piece that begins with the word-start marker).
  std::vector<int> word_index(const std::vector<std::string>& tokens) const;
  // The words the tokens form (pieces joined, marker removed); the tokens for word-level tokenizers.
  std::vector<std::string> join_words(const std::vector<std::string>& tokens) const;

 private:
  TokenizerKind kind_ = TokenizerKind::k13a;
  bool lowercase_ = false;
  std::shared_ptr<SpmServer> spm_;  // shared by copies; requests are serialized
};

// The attnmt-spm helper to start (the CLI passes ATTNMT_SPM_HELPER here); by default the one beside the
// running binary, else the one the build made.
void set_spm_helper_path(const std::string& path);

// Training options for one SentencePiece model.
struct SpmTrainOptions {
  int vocab_size = 8000;
  std::string model_type = "unigram";  // unigram | bpe
  double character_coverage = 1.0;
};
// Trains a model on the lines (deterministic: same lines and options give the same bytes) and returns
// it serialized; throws UsageError with SentencePiece's reason (e.g. a vocabulary larger than the text allows).
std::string train_sentencepiece(const std::vector<std::string>& lines, const SpmTrainOptions& opt, const std::string& what);
// Reads a .model file's bytes; throws UsageError naming a file it cannot open. Whether the bytes are a
// model is checked when a Tokenizer loads them (Tokenizer::pieces with the file's name).
std::string read_sentencepiece_model(const std::string& path);

// Sums a token-level attention map [rows][src tokens] into words: source columns of a word are added,
// target rows of a word are averaged, so rows still sum to 1. Rows beyond tgt_word (the <eos> step)
// are kept, each as its own row. Word indices must be non-decreasing from 0 (as word_index gives).
std::vector<std::vector<float>> word_level_map(const std::vector<std::vector<float>>& weights,
                                               const std::vector<int>& src_word, const std::vector<int>& tgt_word);

}  // namespace attnmt
