// Encoder and decoder: GRU or LSTM behind one small wrapper, the bridge from encoder to decoder state,
// and the decoder with its two designs (Bahdanau-style context into the RNN; Luong-style attentional
// state after the RNN, optionally fed back as input).
#pragma once
#include <torch/torch.h>

#include "common/config.h"
#include "model/attention.h"

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
};
TORCH_MODULE(Rnn);

struct EncoderOutput {
  torch::Tensor states;  // [B, S, H] (H = hidden_dim; both directions concatenated)
  torch::Tensor mask;    // [B, S] bool
  torch::Tensor final_h; // [B, H] last layer's final state, both directions
  torch::Tensor final_c; // [B, H] LSTM cell (undefined for GRU)
};

class EncoderImpl : public torch::nn::Module {
 public:
  EncoderImpl(const ModelConfig& cfg, int64_t vocab);
  // src [B, S] int64, lengths [B] int64 on the CPU, mask [B, S] bool.
  EncoderOutput forward(const torch::Tensor& src, const torch::Tensor& lengths, const torch::Tensor& mask);

 private:
  bool bidirectional_;
  int64_t layers_;
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout drop{nullptr};
  Rnn rnn{nullptr};
};
TORCH_MODULE(Encoder);

// Decoder state between steps.
struct DecoderState {
  RnnState rnn;          // recurrent state
  torch::Tensor feed;    // [B, H] previous attentional state (input feeding), else undefined
  torch::Tensor fixed;   // [B, H] the fixed context of the attention-free model, else undefined
  DecoderState index_select(const torch::Tensor& rows) const;
};

struct DecoderStepOutput {
  torch::Tensor readout;       // [B, R] pre-output state (the output layer maps it to logits)
  torch::Tensor weights;       // [B, S] or undefined (no attention)
  torch::Tensor head_weights;  // [B, heads, S] or undefined
};

struct DecoderOutput {
  torch::Tensor readout;       // [B, T, R], or [N, R] at the requested rows
  torch::Tensor weights;       // [B, T, S] or undefined
  torch::Tensor head_weights;  // [B, heads, T, S] or undefined
};

// The decoder's layer sizes, derived from the config in one place (the decoder and the FLOP counter use them).
struct DecoderDims {
  bool luong_style = false;  // attention queried with the current state (luong, scaled_dot)
  int64_t rnn_input = 0;     // embedding, plus the context (Bahdanau / none) or the fed-back attentional state
  int64_t readout_input = 0; // Luong: [c; s] (2H); Bahdanau / none: [s; c; e] (2H + E)
};
DecoderDims decoder_dims(const ModelConfig& cfg);

class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const ModelConfig& cfg, int64_t vocab);
  DecoderState init_state(const EncoderOutput& enc);
  AttentionMemory prepare(const EncoderOutput& enc);  // keys projected once per batch
  // One step: y_prev [B] int64.
  DecoderStepOutput step(const torch::Tensor& y_prev, DecoderState& state, const AttentionMemory& mem);
  // Teacher-forced pass over tgt_in [B, T]. Uses the all-steps path when the math allows and
  // stepwise is false; teacher_forcing < 1 samples the model's own predictions (stepwise).
  // With rows (int64 flat positions b * T + t) the readout is computed at those positions only: [N, R].
  DecoderOutput forward(const torch::Tensor& tgt_in, DecoderState state, const AttentionMemory& mem,
                        double teacher_forcing = 1.0, bool stepwise = false, const torch::Tensor& rows = {});
  torch::Tensor logits(const torch::Tensor& readout) { return out(drop(readout)); }
  bool has_attention() const { return static_cast<bool>(attention_); }
  bool luong_style() const { return luong_style_; }
  bool can_run_all_steps() const { return luong_style_ && !input_feeding_; }
  int64_t heads() const { return attention_ ? attention_->heads() : 0; }

 private:
  bool luong_style_;    // attention queried with the current state (luong, scaled_dot)
  bool input_feeding_;  // h~_{t-1} joins the next input
  int64_t hidden_, layers_;
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout drop{nullptr};
  Rnn rnn{nullptr};
  std::shared_ptr<AttentionImpl> attention_;
  torch::nn::Linear bridge_h{nullptr}, bridge_c{nullptr};
  torch::nn::Linear combine{nullptr};  // Luong: h~ = tanh(W_c [c; s]); Bahdanau/none: readout tanh(W [s; c; e])
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace attnmt
