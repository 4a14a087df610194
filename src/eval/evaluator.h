// Loading a trained run, translating sentences, and evaluating a test set: BLEU, chrF, BLEU by
// source length, decoding speed, and (with gold alignments) AER and attention entropy.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/config.h"
#include "data/corpus.h"
#include "data/text.h"
#include "data/vocab.h"
#include "eval/result.h"
#include "eval/search.h"
#include "model/seq2seq.h"

namespace attnmt {

struct LoadedRun {
  Config cfg;
  Vocab src_vocab, tgt_vocab;
  Seq2Seq model{nullptr};
  torch::Device device = torch::kCPU;
  Tokenizer tok;  // the run's tokenizer (its SentencePiece models for a subword run)
  std::string checkpoint;  // path loaded
};

// Reads run_dir/config.json, the vocabularies and a checkpoint: which = best | last (run_dir/best.pt,
// last.pt) or the path of a checkpoint file of the same model (an averaged one); throws UsageError on
// anything missing or inconsistent. device_spec empty = the run's config.
LoadedRun load_run(const std::string& run_dir, const std::string& which = "best", const std::string& device_spec = "");

struct Translation {
  std::vector<std::string> src_tokens;       // model tokens (pieces for a subword run)
  std::vector<std::string> tgt_tokens;
  std::string text;                          // detokenized
  std::vector<std::vector<float>> weights;   // [tgt_len + 1][src_len] when asked, over model tokens
  double score = 0;    // what the search ranked by (length-penalised for beam search)
  double logprob = 0;  // total log-probability of the tokens and <eos>
};

// The attention rows of a translation's tokens, the <eos> step left out: one row per target token.
std::vector<std::vector<float>> token_weights(const Translation& t);

// Translates raw lines (tokenized with the run's tokenizer). Empty lines give empty translations.
// Decodes in length-sorted batches of batch_size; beam_size 1 uses greedy search.
std::vector<Translation> translate_lines(LoadedRun& run, const std::vector<std::string>& lines,
                                         const SearchOptions& opt, int batch_size);

// The same with up to opt.nbest (<= beam_size) hypotheses per line, best first; the first is translate_lines'
// result. An empty line gives one empty hypothesis.
std::vector<std::vector<Translation>> translate_lines_nbest(LoadedRun& run, const std::vector<std::string>& lines,
                                                            const SearchOptions& opt, int batch_size);

// A translation's attention at word level: source and target words (pieces joined) and the weights
// summed into them (word_level_map); the translation itself for a word-level run.
Translation word_level(const LoadedRun& run, const Translation& t);

// Translates srcs, scores against refs; with aligns (one per sentence), also AER/entropy by forcing
// the reference through the model.
EvalResult evaluate_sentences(LoadedRun& run, const std::vector<std::string>& srcs,
                              const std::vector<std::string>& refs, const std::vector<Alignment>* aligns,
                              const SearchOptions& opt, std::vector<std::string>* hyps_out = nullptr);

// A sentence's self-attention weights, per layer: the encoder's [heads, S, S] and the decoder's [heads, T+1, T+1]
// (queries and keys are the decoder's inputs <bos> y1 .. y_T; the last query predicts <eos>). Empty for RNN sides.
struct SelfAttentionMaps {
  std::vector<torch::Tensor> encoder, decoder;
};

// Attention weights of the model while it is forced along the reference: [tgt_len][src_len] per
// sentence (the <eos> step is left out). Empty rows for the attention-free model. self_maps: each sentence's
// self-attention weights.
std::vector<std::vector<std::vector<float>>> forced_attention(LoadedRun& run, const std::vector<std::vector<std::string>>& src,
                                                              const std::vector<std::vector<std::string>>& tgt,
                                                              std::vector<torch::Tensor>* head_weights = nullptr,
                                                              double* ppl = nullptr,
                                                              std::vector<SelfAttentionMaps>* self_maps = nullptr);

struct EvalRequest {
  std::string split = "test";   // test | valid: files from the run's config
  std::string src, ref, align;  // explicit files instead (align may be given with a split too)
  int beam = 0;                 // 0 = the config's eval.beam_size
};

// Decodes the requested files with a loaded run, writes run_dir/eval/<name>.hyp and <name>.json
// (name = split, or "custom" for explicit files) and returns the result.
EvalResult evaluate_run(LoadedRun& run, const std::string& run_dir, const EvalRequest& req);

}  // namespace attnmt
