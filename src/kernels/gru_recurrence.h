// Recurrences run as one autograd node each: on the CPU through attnmt's kernels, elsewhere (a GPU's tensors, and
// every tensor under --kernels reference) in LibTorch operations arranged to dispatch few per step
// (gru_recurrence_device.h). The Bahdanau decoder recurrence over all
// target steps: per step, the attention query
// W_q s_{t-1}, additive scores, masked softmax and context, then one GRU cell fed [e_t; c_t].
//
// Why one node: under autograd every step adds some 40 small nodes; their backward accumulates the key,
// value and weight gradients step by step (an add of a whole [B, S, A] or [3H, H] tensor each time), and
// computes each weight gradient as T products of B rows. Here the backward walks the steps once, adds the
// key/value gradients into one buffer, and computes each weight gradient as a single product over all
// T x B rows. The GRU's product with s_{t-1} and the attention query's share one matrix product.
#pragma once
#include <torch/torch.h>

namespace attnmt {

// One GRU cell from its precomputed gate inputs gi = W_ih x + b_ih and gh = W_hh h + b_hh ([B, 3H], gates r, z, n):
// r, z = sigmoid(gi + gh), n = tanh(gi_n + r gh_n), h' = (1 - z) n + z h. No autograd of its own.
struct GruCell {
  torch::Tensor h, rz, n;  // new state, the r and z gates [B, 2H], n [B, H]
};
GruCell gru_cell(const torch::Tensor& gi, const torch::Tensor& gh, const torch::Tensor& h, int64_t H);

// A one-layer GRU over all T steps from its precomputed input gates gi_x = W_ih x + b_ih ([B, T, 3H]), as one
// autograd node: h0 [B, H], w_hh [3H, H], b_hh [3H] -> states [B, T, H]. ATen's GRU backward builds a dozen
// nodes per step and adds each step's W_hh gradient into the total; here W_hh's gradient is one product over
// all T x B rows. Same values and gradients as torch::nn::GRU.
torch::Tensor gru_sequence(const torch::Tensor& gi_x, const torch::Tensor& h0, const torch::Tensor& w_hh, const torch::Tensor& b_hh);

// D such GRUs side by side (the two directions of a bidirectional layer, the second over reversed sentences):
// gi_x [D, B, T, 3H], h0 [D, B, H], w_hh [D, 3H, H], b_hh [D, 3H] -> [D, B, T, H]. The CPU kernels run each
// direction's node in turn; elsewhere (a GPU, --kernels reference) the directions share each step's operations.
torch::Tensor gru_sequences(const torch::Tensor& gi_x, const torch::Tensor& h0, const torch::Tensor& w_hh, const torch::Tensor& b_hh);

struct AdditiveGruRecurrence {
  torch::Tensor states;    // [B, T, H] s_1 .. s_T
  torch::Tensor contexts;  // [B, T, C] c_1 .. c_T (c_t computed from s_{t-1})
  torch::Tensor weights;   // [B, T, S] attention weights (no gradient)
};

// gi_x [B, T, 3H]: the GRU's input gates from the target embeddings, bias b_ih included (computed outside for
// all steps in one product); h0 [B, H]; keys [B, S, A] (U h_j + b); values [B, S, C]; mask [B, S] bool;
// w_ctx [3H, C]: the columns of W_ih that multiply the context; w_hh [3H, H], b_hh [3H]; w_q [A, H]; v [A].
// Gate order r, z, n as in torch::nn::GRU.
AdditiveGruRecurrence additive_gru_recurrence(const torch::Tensor& gi_x, const torch::Tensor& h0, const torch::Tensor& keys,
                                              const torch::Tensor& values, const torch::Tensor& mask, const torch::Tensor& w_ctx,
                                              const torch::Tensor& w_hh, const torch::Tensor& b_hh, const torch::Tensor& w_q,
                                              const torch::Tensor& v);

}  // namespace attnmt
