// Decoding: batched greedy and beam search.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include <torch/torch.h>

#include "data/batcher.h"
#include "model/seq2seq.h"

namespace attnmt {

struct Hypothesis {
  std::vector<int64_t> tokens;   // without <bos>/<eos>
  double score = 0;              // what the search ranked by: logprob / length_penalty(len + 1) (beam), logprob (greedy)
  double logprob = 0;            // total log-probability of the tokens and <eos>
  std::vector<std::vector<float>> weights;  // [tgt_len + 1][src_len] (incl. the <eos> step), when asked
};

struct SearchOptions {
  double max_len_ratio = 1.5;  // stop after max_len_ratio * src_len + 10 tokens
  bool keep_weights = false;   // record attention weights per step
  int beam_size = 1;           // beam width (beam_search only)
  double length_penalty = 1.0; // GNMT alpha: score / ((5 + len) / 6)^alpha; 0 = raw log-probability
  int nbest = 1;               // hypotheses returned per sentence (beam_search only)
  bool stop_at_eos = true;     // greedy: false runs every row to the length limit (benchmarks)
  // Greedy on CUDA with an RNN decoder and no maps: the decoder step recorded once as a CUDA graph and launched as one
  // unit per step (common/cuda_graph.h). False: every operation launched on its own (benchmarks compare the two).
  bool cuda_graph = true;
  // Asked before every decoder step: true ends the search with SearchCancelled (serve: its client's deadline passed,
  // or the server is stopping). Empty: never.
  std::function<bool()> cancelled;
};

// A search ended by SearchOptions::cancelled.
struct SearchCancelled : std::runtime_error {
  SearchCancelled() : std::runtime_error("decoding cancelled") {}
};

// The search options a run's eval config gives (beam > 0 overrides eval.beam_size).
// beam <= 0 and length_penalty < 0 take the config's eval.beam_size and eval.length_penalty.
SearchOptions search_options(const EvalConfig& eval, int beam = 0, double length_penalty = -1);

// What a search computed: decoder steps run and rows advanced in them (summed over steps).
struct SearchStats {
  int64_t steps = 0;
  int64_t row_steps = 0;
};

// GNMT length penalty ((5 + len) / 6)^alpha.
double length_penalty(int64_t len, double alpha);

// Whether greedy_search records this model's decoder step as a CUDA graph with these options on this device: on
// CUDA in a LibTorch with CUDA, an RNN decoder, no attention maps, a precision other than bf16, and opt.cuda_graph.
bool greedy_step_graphed(Seq2Seq& model, const SearchOptions& opt, const torch::Device& device);

// Greedy search over a batch (rows in batch order). Runs under NoGradGuard; the caller sets eval().
std::vector<Hypothesis> greedy_search(Seq2Seq& model, const Batch& batch, const SearchOptions& opt,
                                      const torch::Device& device);

// Beam search over a batch: batch x beam rows advance together. Returns up to nbest hypotheses per
// sentence, best first by score / length_penalty(len) where len counts the tokens including <eos>.
// A sentence stops only when no unfinished hypothesis can still beat its best finished one under the
// penalty (the best an unfinished hypothesis can reach is its current log-probability divided by the
// penalty at the length limit), or at the length limit.
// stats, when given, receives the work done (benchmarks count FLOPs from it).
std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const Batch& batch, const SearchOptions& opt,
                                                 const torch::Device& device, SearchStats* stats = nullptr);

}  // namespace attnmt
