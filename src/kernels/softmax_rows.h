// The rows of a log-softmax without writing it: the greedy pick over rows of logits and the label-smoothed
// cross-entropy's rows and gradient, in two passes over a row where ATen's ops make four or five and write [N, V]
// temporaries. 4, 8 (AVX2) or 16 (AVX-512) lanes chosen at run time. Reference: ATen's log_softmax / logsumexp,
// gather and mean (the callers' other branch, and these functions' own where the kernel does not apply).
#pragma once
#include <torch/torch.h>

namespace attnmt {

struct RowArgmax {
  torch::Tensor ids;   // [B] int64: the first index of each row's largest logit
  torch::Tensor logp;  // [B] float: that token's log-probability, -log(sum_v exp(x_v - max))
};

// What log_softmax(logits).max(-1) gives, in two passes over each row (max, then the sum of exponentials)
// where ATen's log_softmax and max make four and write a [B, V] tensor. logits: [B, V]. Float rows on the
// CPU use the kernel under --kernels auto (at most max_lanes lanes: 4, 8 or 16; for tests), anything else ATen's ops.
RowArgmax argmax_log_softmax(const torch::Tensor& logits, int max_lanes = 16);

// The rows of the label-smoothed cross-entropy over logits [N, V] (float, CPU; false and nothing written
// otherwise): lse_i = log sum_v exp(x_iv) and loss_i = (1 - eps) (lse_i - x_i[t_i]) + eps (lse_i - mean_v x_iv),
// loss_i = 0 where valid_i is false. Two passes over a row (its maximum and sum, then the sum of exponentials),
// where ATen's logsumexp, gather and mean make five and write a [N, V] temporary. A row with a non-finite
// logit is computed in double with the C library (its loss is then NaN or infinite, as ATen's would be). Rows
// are shared between as many threads as the BLAS uses; each row's result does not depend on that.
struct CrossEntropyRows {
  torch::Tensor loss;  // [N] float
  torch::Tensor lse;   // [N] float (0 where not valid)
};
bool cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& valid, double eps,
                        CrossEntropyRows* out, int max_lanes = 16);
// Its gradient in one pass, scale_i (softmax(x_i) - eps / V - (1 - eps) onehot(t_i)), written into a new [N, V]
// tensor (zero rows where scale_i is 0); logits, target and lse as above, scale [N] float. False and nothing
// written where the kernel does not apply.
bool cross_entropy_grad(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& lse,
                        const torch::Tensor& scale, double eps, torch::Tensor* grad, int max_lanes = 16);

}  // namespace attnmt
