// The greedy choice over rows of output-layer logits without a log-softmax: a hand-written CPU kernel in
// 4, 8 (AVX2) or 16 (AVX-512) lanes chosen at run time, as SIMD code is kept apart from its callers.
#pragma once
#include <torch/torch.h>

namespace attnmt {

struct RowArgmax {
  torch::Tensor ids;   // [B] int64: the first index of each row's largest logit
  torch::Tensor logp;  // [B] float: that token's log-probability, -log(sum_v exp(x_v - max))
};

// What log_softmax(logits).max(-1) gives, in two passes over each row (max, then the sum of exponentials)
// where ATen's log_softmax and max make four and write a [B, V] tensor. logits: [B, V]. Float rows on the
// CPU use the kernel (at most max_lanes lanes: 4, 8 or 16; for tests), anything else ATen's ops.
RowArgmax argmax_log_softmax(const torch::Tensor& logits, int max_lanes = 16);

}  // namespace attnmt
