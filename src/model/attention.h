// The attention family behind one interface. Keys (and values) are projected once per batch in
// prepare(); attend() then scores queries for one step ([B, Q]) or for all steps at once ([B, T, Q]).
// Padded source positions get weight exactly 0.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "common/scoped_setting.h"
#include "kernels/additive_scores.h"
#include "model/linear.h"

namespace attnmt {

// Encoder states prepared for attention (projected once per batch).
struct AttentionMemory {
  torch::Tensor keys;    // [B, S, K] projected keys (layout depends on the mechanism)
  torch::Tensor values;  // [B, S, V] values
  torch::Tensor mask;    // [B, S] bool, true at real source tokens (a self-attention decoder's own: [B, T, S])
  torch::Tensor blocked;  // [B, S] bool, not mask: made once per batch by an RNN decoder's prepare(), or undefined
  std::vector<AttentionMemory> layers;  // a self-attention decoder: each layer's cross-attention memory
  // Rows reordered/expanded along the batch (beam search).
  AttentionMemory index_select(const torch::Tensor& rows) const;
};

struct AttentionOutput {
  torch::Tensor context;       // [B, T, C]
  torch::Tensor weights;       // [B, T, S], rows sum to 1 (mean over heads)
  torch::Tensor head_weights;  // [B, heads, T, S] for multi-head attention, else undefined
  torch::Tensor scores;        // the scores before the softmax, [..., T, S] (scaled_dot_product only)
};

// softmax(q k^T / sqrt(d)) v with masking. q [B, T, d], k [B, S, d], v [B, S, dv], mask [B, S] bool (or any
// leading axes shared by q, k, v; undefined: every key takes part). scale false leaves out the 1/sqrt(d) (the lab's experiment key).
// blocked, when given, is not mask, made once for many calls (one operation less each).
AttentionOutput scaled_dot_product(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& mask, bool scale = true, const torch::Tensor& blocked = {});

// Additive scores v^T tanh(wq_t + k_s) for every query t and key s, as one autograd node:
// wq [B, T, A], keys [B, S, A], v [A] -> [B, T, S]. For float CPU tensors the forward is one pass over the
// keys (tanh as a rational function, error < 4e-7) and keeps the tanh values only when a gradient is needed;
// the backward reads them once and writes the query, key and v gradients in the same pass.
torch::Tensor additive_scores(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v);

// Whether attend() must form the attention weights: maps, alignments and the lab's scores read them. Where nobody
// does (a training step, decoding without maps) scaled dot-product and Luong's dot/general attention on the device path
// (no CPU kernels: --kernels reference, or a GPU) run as LibTorch's one fused operation, at::scaled_dot_product_attention
// (LibTorch >= 2.1: flash and memory-efficient kernels on a GPU), which never materialises the weights, and attend()
// leaves them undefined. On by default; a ScopedAttentionMaps turns it off for its thread while it lives.
bool attention_maps_wanted();
void set_attention_maps_wanted(bool wanted);
using ScopedAttentionMaps = ScopedSetting<bool, attention_maps_wanted, set_attention_maps_wanted>;
// Whether this LibTorch has the fused operation (2.1 and later: the one place that decides).
bool fused_attention_available();

// Softmax over the source axis with masked positions set to exactly 0. scores [B, T, S] (or [B, h, T, S]).
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask);
// The same over a memory's source positions, with its blocked positions made once per batch where it has them.
torch::Tensor masked_softmax(const torch::Tensor& scores, const AttentionMemory& mem);

class AttentionImpl : public torch::nn::Module {
 public:
  // enc_states [B, S, H_enc], mask [B, S]
  virtual AttentionMemory prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) = 0;
  // query [B, T, Q] -> context [B, T, C] and weights [B, T, S]
  virtual AttentionOutput attend(const torch::Tensor& query, const AttentionMemory& mem) = 0;
  virtual int64_t context_dim() const = 0;
  virtual int64_t heads() const { return 1; }
  // The factor the scores are multiplied by before the softmax (1/sqrt(d) for scaled dot-product; 1 otherwise).
  virtual double score_scale() const { return 1.0; }
  // The heads' contexts [B, heads, T, d] made into the mechanism's context [B, T, C]: one head's as it is; several
  // heads' joined and projected back (MultiHeadAttention).
  virtual torch::Tensor join_heads(const torch::Tensor& contexts);

  // Two hooks for whoever studies a mechanism from outside (the explanation of a step, the lab's probes); each is off
  // while empty, and while either is set the fused path stands aside (weights and scores are formed).
  // observe: every attend() hands the observer its query, memory and result (scores before the softmax, weights).
  using Observer = std::function<void(const torch::Tensor& query, const AttentionMemory& mem, const AttentionOutput& out)>;
  void observe(Observer o) { observer_ = std::move(o); }
  // edit_weights: the weights [B, T, S] replaced by edit(weights, mask) before the context is formed (counterfactual
  // decoding). Bahdanau and Luong; scaled dot-product refuses.
  using WeightsEdit = std::function<torch::Tensor(const torch::Tensor& weights, const torch::Tensor& mask)>;
  void edit_weights(WeightsEdit edit) { edit_ = std::move(edit); }

 protected:
  // w as the edit says (unchanged without one).
  torch::Tensor edited(const torch::Tensor& w, const torch::Tensor& mask) const { return edit_ ? edit_(w, mask) : w; }
  bool editing() const { return static_cast<bool>(edit_); }
  // Whether this call may run as the fused operation (attention_maps_wanted): nobody reads its weights or scores, the
  // device path, a LibTorch that has it, and no hook set.
  bool fused_for(const torch::Tensor& query) const;
  // Hands a result to the observer, if any, and returns it.
  AttentionOutput observed(const torch::Tensor& query, const AttentionMemory& mem, AttentionOutput out) const {
    if (observer_) observer_(query, mem, out);
    return out;
  }

 private:
  Observer observer_;
  WeightsEdit edit_;
};

// Bahdanau et al. 2015 (additive): score(s, h) = v^T tanh(W s + U h). Also Luong's "concat":
// v^T tanh(W [s; h]) = v^T tanh(W_s s + W_h h), the same computation queried with the current state.
class AdditiveAttention : public AttentionImpl {
 public:
  AdditiveAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim);
  AttentionMemory prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) override;
  AttentionOutput attend(const torch::Tensor& query, const AttentionMemory& mem) override;
  int64_t context_dim() const override { return key_dim_; }
  const torch::Tensor& query_weight() const { return w_query->weight; }  // [A, Q]
  torch::Tensor v_vector() const { return v->weight.view({-1}); }        // [A]

 private:
  int64_t key_dim_;
  Linear w_query{nullptr}, u_key{nullptr}, v{nullptr};
};

// Luong et al. 2015 multiplicative: dot s^T h, general s^T W h (W h projected once per batch).
class MultiplicativeAttention : public AttentionImpl {
 public:
  MultiplicativeAttention(int64_t query_dim, int64_t key_dim, bool general);
  AttentionMemory prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) override;
  AttentionOutput attend(const torch::Tensor& query, const AttentionMemory& mem) override;
  int64_t context_dim() const override { return key_dim_; }

 private:
  int64_t key_dim_;
  Linear w{nullptr};  // general only
};

// Vaswani et al. 2017 scaled dot-product attention with `heads` heads: Q from the decoder state,
// K and V projected from the encoder states, heads concatenated and projected back.
class MultiHeadAttention : public AttentionImpl {
 public:
  // scale false: scores q·k without the 1/sqrt(d) (model.attention.scale).
  MultiHeadAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim, int64_t heads, bool scale = true);
  AttentionMemory prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) override;
  // The keys and values of states [B, S, key_dim] as [B, heads, S, d], without a mask (every position a key).
  AttentionMemory keys_values(const torch::Tensor& states);
  AttentionOutput attend(const torch::Tensor& query, const AttentionMemory& mem) override;
  // queries [B, T, query_dim] attending to the states keys_values [B, S, key_dim] (mask [B, S]): prepare, then attend.
  // Self-attention is forward(x, x, mask).
  AttentionOutput forward(const torch::Tensor& queries, const torch::Tensor& keys_values, const torch::Tensor& mask) {
    return attend(queries, prepare(keys_values, mask));
  }
  int64_t context_dim() const override { return key_dim_; }
  int64_t heads() const override { return heads_; }
  // 1/sqrt(d) per head, or 1 (model.attention.scale).
  double score_scale() const override;
  // W_o [c_1; ...; c_h] -> [B, T, key_dim].
  torch::Tensor join_heads(const torch::Tensor& contexts) override;

 private:
  int64_t key_dim_, attn_dim_, heads_;
  bool scale_;
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
};

// Builds the mechanism cfg.attention names (nullptr for type none: the fixed context).
std::shared_ptr<AttentionImpl> make_attention(const ModelConfig& cfg);

// What the rest of the program asks of an attention type, decided here beside the factory (common/config.cpp names
// the types and checks which keys apply to which).
struct AttentionTraits {
  bool attends = false;     // false for none: the decoder sees one fixed context vector
  bool after_rnn = false;   // scores the RNN's new state (Luong, scaled dot-product: input feeding applies), not the
                            // previous one (Bahdanau)
  std::string label;        // the type and its score function: none, bahdanau, luong-general, scaled_dot
  std::string summary;      // for reports: bahdanau, luong/general, scaled_dot/4 heads
  std::string score_formula;  // the lesson's notation: score(q, k_j) = v . tanh(W q + U k_j), ...
  std::string scale_reason;   // why the scores are scaled, or need not be
};
AttentionTraits attention_traits(const AttentionConfig& a);

// Multiply-adds of the mechanism (attention width A, state width H): once per source token (keys) and per decoder
// step with S source positions.
struct AttentionMacs {
  double per_source_token = 0;
  double per_step = 0;
};
AttentionMacs attention_macs(const AttentionConfig& a, double H, double A, double S);

}  // namespace attnmt
