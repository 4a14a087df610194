// Translation with a loaded run: raw lines tokenized with the run's tokenizer, decoded in length-sorted batches by
// greedy or beam search (translate/search.h), and the hypotheses given over model tokens or at word level, with their
// scores and attention. `translate`, `serve`, `evaluate`, `attention` and the lab only format what this returns.
// Also the reference forced through the model (the maps of `attention`, AER, perplexity).
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/corpus.h"
#include "data/tokenizer.h"
#include "run/loaded_run.h"
#include "translate/search.h"

namespace attnmt {

struct Translation {
  std::vector<std::string> src_tokens;       // model tokens (pieces for a subword run), or words (Translator::words)
  std::vector<std::string> tgt_tokens;
  std::string text;                          // detokenized
  std::vector<std::vector<float>> weights;   // [tgt_len + 1][src_len] when asked, over src_tokens/tgt_tokens
  double score = 0;    // what the search ranked by (length-penalised for beam search)
  double logprob = 0;  // total log-probability of the tokens and <eos>
};

// The attention rows of a translation's tokens, the <eos> step left out: one row per target token.
std::vector<std::vector<float>> token_weights(const Translation& t);

// Tokens, and the attention between them, at word level: pieces joined into words, each row and column summed or
// averaged over a word's pieces (data/tokenizer.h, word_level_map); unchanged for a word-level tokenizer.
struct WordLevel {
  std::vector<std::string> src, tgt;
  std::vector<std::vector<float>> weights;
};
WordLevel word_level(const Tokenizer& tok, const std::vector<std::string>& src_tokens,
                     const std::vector<std::string>& tgt_tokens, const std::vector<std::vector<float>>& weights);

// A hypothesis at word level: source and target words and the attention summed into them; the hypothesis itself for a
// word-level run.
Translation word_level(const Tokenizer& tok, const Translation& t);

// The hard alignment of a translation's tokens (the <eos> step left out): argmax source per target token, or every
// link above threshold (> 0). Pairs (source, target), 0-based.
Alignment alignment_of(const Translation& t, double threshold = 0.0);

class Translator {
 public:
  // batch_size: sentences a decoder batch holds (0: the run's eval.batch_size). beam_size 1 searches greedily.
  Translator(LoadedRun& run, SearchOptions opt, int batch_size = 0);

  // Up to opt.nbest (<= beam_size) hypotheses per line, best first, over model tokens. An empty line, or one whose
  // search finished nothing, gives one empty hypothesis.
  std::vector<std::vector<Translation>> nbest(const std::vector<std::string>& lines) const;
  // The same in two halves, for a caller that looks at the tokens before decoding them (serve counts them against its
  // limits): the lines tokenized with the run's tokenizer, then those tokens decoded.
  std::vector<std::vector<std::string>> tokenize(const std::vector<std::string>& lines) const;
  std::vector<std::vector<Translation>> nbest_tokens(const std::vector<std::vector<std::string>>& src_tokens) const;
  // The best hypothesis of each line (nbest's first).
  std::vector<Translation> best(const std::vector<std::string>& lines) const;
  const LoadedRun& run() const { return run_; }

 private:
  LoadedRun& run_;
  SearchOptions opt_;
  int batch_size_;
};

// A sentence's self-attention weights, per layer: the encoder's [heads, S, S] and the decoder's [heads, T+1, T+1]
// (queries and keys are the decoder's inputs <bos> y1 .. y_T; the last query predicts <eos>). Empty for RNN sides.
struct SelfAttentionMaps {
  std::vector<torch::Tensor> encoder, decoder;
};

// Attention weights of the model while it is forced along the reference: [tgt_len][src_len] per
// sentence (the <eos> step is left out). Empty rows for the attention-free model. head_weights: each sentence's
// [heads, T, S]; ppl: the teacher-forced perplexity; self_maps: each sentence's self-attention weights.
std::vector<std::vector<std::vector<float>>> forced_attention(LoadedRun& run, const std::vector<std::vector<std::string>>& src,
                                                              const std::vector<std::vector<std::string>>& tgt,
                                                              std::vector<torch::Tensor>* head_weights = nullptr,
                                                              double* ppl = nullptr,
                                                              std::vector<SelfAttentionMaps>* self_maps = nullptr);

}  // namespace attnmt
