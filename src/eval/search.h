// Decoding: batched greedy search (beam search comes with the decoding issue).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "data/batcher.h"
#include "model/seq2seq.h"

namespace attnmt {

struct Hypothesis {
  std::vector<int64_t> tokens;   // without <bos>/<eos>
  double score = 0;              // total log-probability
  std::vector<std::vector<float>> weights;  // [tgt_len + 1][src_len] (incl. the <eos> step), when asked
};

struct SearchOptions {
  double max_len_ratio = 1.5;  // stop after max_len_ratio * src_len + 10 tokens
  bool keep_weights = false;   // record attention weights per step
};

// Greedy search over a batch (rows in batch order). Runs under NoGradGuard; the caller sets eval().
std::vector<Hypothesis> greedy_search(Seq2Seq& model, const Batch& batch, const SearchOptions& opt,
                                      const torch::Device& device);

}  // namespace attnmt
