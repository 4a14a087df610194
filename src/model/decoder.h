// The decoder, in its two designs: Bahdanau-style (the context, queried with s_{t-1}, enters the RNN;
// `none` passes the fixed context vector instead) and Luong-style (attention after the RNN, queried with
// s_t, giving the attentional state h~_t, optionally fed back as input). forward() runs a teacher-forced
// pass along one of five paths, chosen in one place (DecoderImpl::path_for); each path is its own function.
// model.decoder.type self_attention replaces the RNN by a causally masked self-attention stack
// (model/self_attention.h) that keeps each layer's keys and values of the prefix between steps.
#pragma once
#include <torch/torch.h>

#include "common/config.h"
#include "model/dropout.h"
#include "model/attention.h"
#include "model/encoder.h"
#include "model/linear.h"
#include "model/rnn.h"
#include "model/self_attention.h"

namespace attnmt {

// Decoder state between steps.
struct DecoderState {
  RnnState rnn;          // recurrent state
  torch::Tensor feed;    // [B, H] previous attentional state (input feeding), else undefined
  torch::Tensor fixed;   // [B, H] the fixed context of the attention-free model, else undefined
  SelfAttentionCache cache;  // self-attention decoder: each layer's keys and values of the prefix
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
  std::vector<torch::Tensor> self_weights;  // self-attention decoder, teacher-forced: per layer [B, heads, T, T]
};

// The decoder's layer sizes, derived from the config in one place (the decoder and the FLOP counter use them).
struct DecoderDims {
  bool luong_style = false;  // attention queried with the current state (luong, scaled_dot)
  int64_t rnn_input = 0;     // embedding, plus the context (Bahdanau / none) or the fed-back attentional state
  int64_t readout_input = 0; // Luong: [c; s] (2H); Bahdanau / none: [s; c; e] (2H + E)
};
DecoderDims decoder_dims(const ModelConfig& cfg);

// The ways forward() runs a teacher-forced pass. They compute the same function; they differ in how much of
// it is batched over the time steps.
enum class DecoderPath {
  kAllSteps,           // Luong/scaled-dot without input feeding: one RNN call, then attention over all steps
  kFixedContext,       // none: one RNN call over [e_t; c] with the same c at every step
  kFusedRecurrence,    // Bahdanau, one GRU layer: the attention recurrence as one autograd node (kernels/gru_recurrence.h)
  kSteppedRecurrence,  // Bahdanau otherwise: the recurrence stepped, embeddings and readout batched
  kTokenByToken,       // input feeding, teacher_forcing < 1, or asked for: step() at every position
  kSelfAttention,      // self-attention decoder: all positions at once under the causal mask
};

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
  // The output layer W_o h~ + b_o (model/linear.h says which product computes it).
  torch::Tensor logits(const torch::Tensor& readout);
  bool has_attention() const { return attention_ || self_attention; }
  // A stack of self-attention layers rather than a recurrence (its step state, the key/value cache, grows).
  bool is_self_attention() const { return static_cast<bool>(self_attention); }
  // The self-attention stack (is_self_attention() only): its layers, for whoever observes them (attnmt explain).
  const SelfAttentionDecoder& self_attention_stack() const { return self_attention; }
  bool luong_style() const { return luong_style_; }
  bool can_run_all_steps() const { return luong_style_ && !input_feeding_; }
  // The path forward() takes for these arguments: the one place it is chosen.
  DecoderPath path_for(const torch::Device& device, double teacher_forcing, bool stepwise) const;
  int64_t heads() const { return self_attention ? self_attention->cross_heads() : attention_ ? attention_->heads() : 0; }
  // The attention mechanism (null without attention), for instrumentation (AttentionImpl::observe, edit_weights); the
  // last layer's cross-attention of a self-attention decoder.
  AttentionImpl* attention() const { return self_attention ? self_attention->cross_attention() : attention_.get(); }

 private:
  // The paths of forward() (state is advanced in place; rows as in forward()).
  DecoderOutput forward_all_steps(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                  const torch::Tensor& rows);
  DecoderOutput forward_fixed_context(const torch::Tensor& tgt_in, DecoderState& state, const torch::Tensor& rows);
  DecoderOutput forward_fused_recurrence(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                         const torch::Tensor& rows);
  DecoderOutput forward_stepped_recurrence(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                           const torch::Tensor& rows);
  DecoderOutput forward_self_attention(const torch::Tensor& tgt_in, const AttentionMemory& mem, const torch::Tensor& rows);
  DecoderOutput forward_token_by_token(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                       double teacher_forcing, const torch::Tensor& rows);
  // The readout tanh(W_c [features]) at the requested positions only ([B, T, F] -> [N, H]): padding costs no
  // readout product. All positions without rows.
  torch::Tensor readout_at(const torch::Tensor& features, const torch::Tensor& rows);
  // The target embeddings of y (any shape), dropout applied: drop(sqrt(E) x table[y]) tied, drop(table[y]) otherwise.
  torch::Tensor embedded(const torch::Tensor& y);

  bool luong_style_;    // attention queried with the current state (luong, scaled_dot)
  bool input_feeding_;  // h~_{t-1} joins the next input
  bool mask_padding_;   // model.attention.mask
  int64_t hidden_, layers_;
  torch::nn::Embedding embed{nullptr};
  Dropout drop{nullptr};
  Rnn rnn{nullptr};
  std::shared_ptr<AttentionImpl> attention_;
  Linear bridge_h{nullptr}, bridge_c{nullptr};
  Linear combine{nullptr};  // Luong: h~ = tanh(W_c [c; s]); Bahdanau/none: readout tanh(W [s; c; e])
  Linear out{nullptr};       // W_o h~ + b_o; without it (model.tie_output) W_o is embed's table and b_o out_bias
  torch::Tensor out_bias;
  PackedLinear tied_packed_;  // the tied W_o packed for decoding, as Linear packs its own
  double embed_scale_ = 1.0;  // tied: the table is N(0, 1/E) for the output layer, looked up as sqrt(E) x the table
  SelfAttentionDecoder self_attention{nullptr};  // model.decoder.type self_attention (then no rnn, bridge, combine)
};
TORCH_MODULE(Decoder);

}  // namespace attnmt
