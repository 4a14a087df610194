// The recurrent layer behind encoder and decoder: GRU or LSTM in one small wrapper, with the padded-batch
// runs the encoder uses (packed, or by lengths without packing).
#pragma once
#include <torch/torch.h>

#include "common/config.h"
#include "kernels/packed_product.h"

namespace attnmt {

// Recurrent state: h [layers*dirs, B, H]; c for LSTM (undefined for GRU).
struct RnnState {
  torch::Tensor h, c;
  RnnState index_select(const torch::Tensor& rows) const;  // along the batch axis
};

class RnnImpl : public torch::nn::Module {
 public:
  RnnImpl(RnnCell cell, int64_t input, int64_t hidden, int64_t layers, double dropout, bool bidirectional);
  // x [B, T, In] (batch first); state may be undefined (zeros). Returns outputs [B, T, dirs*H].
  std::pair<torch::Tensor, RnnState> forward(const torch::Tensor& x, const RnnState& state);
  // Packed input: padded positions never enter the recurrence; outputs there are zero.
  std::pair<torch::Tensor, RnnState> forward_packed(const torch::Tensor& x, const torch::Tensor& lengths);
  // Same result as forward_packed (zero outputs at padded positions, final states at each sentence's last
  // token), computed on the padded batch: each layer and direction is one unpacked run, the reverse direction
  // over each sentence reversed within its length, so that padding only ever follows the real tokens. On the
  // CPU the packed run is slow to train: every time step's slice of the input projection gets a gradient the
  // size of the whole projection, and the engine adds them up (58 adds of [tokens, 3H] per batch for a
  // bidirectional GRU over 29 steps). GRU on the CPU only; LSTM and other devices use forward_packed.
  std::pair<torch::Tensor, RnnState> forward_lengths(const torch::Tensor& x, const torch::Tensor& lengths);
  // One time step of a one-direction RNN: x [B, In] -> top layer's output [B, H] and the new state. While
  // decoding (eval mode, no gradients) each layer's two products go through packed copies of the weights
  // (kernels/packed_product.h) and the gates are a few elementwise ops; otherwise forward() over one step.
  // On the device path (no CPU kernels: a GPU, or --kernels reference) a step is LibTorch's cell operation per layer
  // (at::gru_cell / at::lstm_cell: on a GPU two products and one fused gate kernel) rather than a one-step run of
  // the whole recurrence (cuDNN's call there), but for training a stack with dropout between its layers.
  std::pair<torch::Tensor, RnnState> step(const torch::Tensor& x, const RnnState& state);
  bool is_lstm() const { return static_cast<bool>(lstm); }
  int64_t layers() const { return layers_; }
  // A weight or bias by its LibTorch name ("weight_ih_l0", "bias_hh_l0", ...).
  torch::Tensor param(const std::string& name) const;

 private:
  int64_t hidden_, layers_;
  double inner_dropout_;  // dropout between stacked layers only
  bool bidirectional_;
  torch::nn::GRU gru{nullptr};
  torch::nn::LSTM lstm{nullptr};
  // One GRU layer and direction over x [B, S, In] while decoding: the input gates of all steps in one packed
  // product, then per step the packed W_hh product and the cell. w: W_ih, W_hh, b_ih, b_hh; which: its packed pair.
  std::pair<torch::Tensor, RnnState> cell_step(const torch::Tensor& x, const RnnState& state);
  torch::Tensor packed_gru_layer(const torch::Tensor& x, size_t which, const std::vector<torch::Tensor>& w);
  std::vector<PackedLinear> packed_ih_, packed_hh_;  // per layer (and direction), for step() and packed_gru_layer()
};
TORCH_MODULE(Rnn);

}  // namespace attnmt
