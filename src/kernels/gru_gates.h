// The GRU cell's gate arithmetic as one pass over each row (float CPU tensors, 16/8/4 lanes chosen at run time,
// rows shared between threads), for the recurrences of kernels/gru_recurrence.h: ATen runs it as about eight passes
// (adds, sigmoid, tanh, multiply-adds) forward and fifteen backward over [B, H]-sized tensors, each behind its own
// dispatch, for every step. Reference: the composed ops in gru_cell (kernels/gru_recurrence.h).
#pragma once
#include <torch/torch.h>

namespace attnmt {

// Forward, gates r, z, n as in torch::nn::GRU: from gi = W_ih x + b_ih and gh = W_hh h + b_hh ([B, 3H] with unit
// stride along a row) and h [B, H]: rz = sigmoid(gi_rz + gh_rz) [B, 2H], n = tanh(gi_n + r gh_n) [B, H],
// h' = n + z (h - n) [B, H]. False, nothing written, where the kernel does not apply (not float, not CPU).
// max_lanes (4, 8 or 16) caps the lane count, for tests.
bool gru_cell_kernel(const torch::Tensor& gi, const torch::Tensor& gh, const torch::Tensor& h, int64_t H, torch::Tensor* h_new,
                     torch::Tensor* rz, torch::Tensor* n, int max_lanes = 16);

// Backward for the gradient dh of h': writes the gradients of gi and gh into the rows of dgi and dgh ([B, 3H],
// unit stride along a row) and returns through *direct the part of h's gradient that does not pass through gh
// (dh z). gh_n: the n third of gh [B, H]. False, nothing written, where the kernel does not apply.
bool gru_cell_backward_kernel(const torch::Tensor& dh, const torch::Tensor& h, const torch::Tensor& rz, const torch::Tensor& n,
                              const torch::Tensor& gh_n, torch::Tensor& dgi, torch::Tensor& dgh, torch::Tensor* direct,
                              int max_lanes = 16);

}  // namespace attnmt
