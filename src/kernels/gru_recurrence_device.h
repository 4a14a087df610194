// The recurrences of gru_recurrence.h in LibTorch operations alone, arranged to dispatch few per step: the path of a
// GPU's tensors and of every tensor under --kernels reference. Called from gru_recurrence.cpp's entry points, which
// choose between them and the CPU kernels; the file's opening comment says how the operations are saved.
#pragma once
#include <vector>

#include <torch/torch.h>

namespace attnmt {

// D one-layer GRUs in one loop: gi_x [D, B, T, 3H] (input gates, b_ih included), h0 [D, B, H], w_hh [D, 3H, H],
// b_hh [D, 3H] -> states [D, B, T, H]. One autograd node.
torch::Tensor gru_sequences_device(const torch::Tensor& gi_x, const torch::Tensor& h0, const torch::Tensor& w_hh,
                                   const torch::Tensor& b_hh);

// additive_gru_recurrence's node: {states [B, T, H], contexts [B, T, C], weights [B, T, S]}. keep: keep what the
// backward needs (a gradient will be asked for).
std::vector<torch::Tensor> additive_gru_recurrence_device(const torch::Tensor& gi_x, const torch::Tensor& h0,
                                                          const torch::Tensor& keys, const torch::Tensor& values,
                                                          const torch::Tensor& mask, const torch::Tensor& w_ctx,
                                                          const torch::Tensor& w_hh, const torch::Tensor& b_hh,
                                                          const torch::Tensor& w_q, const torch::Tensor& v, bool keep);

}  // namespace attnmt
