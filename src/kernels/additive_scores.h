// The additive (Bahdanau / Luong concat) attention scores v^T tanh(wq_t + k_s) as hand-written CPU kernels:
// a one-pass float forward in 4, 8 (AVX2) or 16 (AVX-512) lanes chosen at run time, and a one-pass backward.
// Called by the attention modules (model/attention.h); the reference is the composed ops there (--kernels reference).
#pragma once
#include <torch/torch.h>

namespace attnmt {

// The two halves of additive_scores, for code that runs its own backward pass (the fused decoder recurrence).
// The forward stores the tanh values [B, T, S, A] in *tanh_out when given. The backward returns the gradient
// of wq and adds those of keys ([B, S, A], contiguous) and v into g_keys and g_v, so that several calls can
// share one buffer.
torch::Tensor additive_scores_forward(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v,
                                      torch::Tensor* tanh_out);
torch::Tensor additive_scores_backward(const torch::Tensor& tanh, const torch::Tensor& v, const torch::Tensor& grad_scores,
                                       torch::Tensor& g_keys, torch::Tensor& g_v);

// The context and its backward for one query per sentence, as the fused recurrence needs them per step: a [B, S]
// attention weights, values [B, S, C] -> sum_s a[b, s] values[b, s, :] ([B, C]), and values, dc [B, C] ->
// values[b, s, :] . dc[b, :] ([B, S]). Float CPU tensors in 16/8/4 lanes with the sentences shared between
// threads (ATen's bmm hands the BLAS one tiny product per sentence); anything else through bmm.
torch::Tensor weighted_values(const torch::Tensor& a, const torch::Tensor& values);
torch::Tensor value_dots(const torch::Tensor& values, const torch::Tensor& dc);

// The same backward from the forward's inputs wq [B, T, A] and keys [B, S, A], the tanh values recomputed (in the
// forward's lanes, so the same values) instead of read: nothing [B, T, S, A]-sized is kept between the passes.
torch::Tensor additive_scores_backward_from_inputs(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v,
                                                   const torch::Tensor& grad_scores, torch::Tensor& g_keys, torch::Tensor& g_v);

// The float forward runs 16 (AVX-512) or 8 (AVX2) lanes where the CPU has them, else 4. Caps the lane count
// (4, 8 or 16; for tests and benchmarks) and returns the count now in use.
int set_additive_lanes(int max_lanes);

}  // namespace attnmt
