// Self-attention stacks (Vaswani et al. 2017): queries, keys and values from one sequence, through attnmt's one
// scaled dot-product attention (MultiHeadAttention, with its padding mask). Layers are pre-norm (Xiong et al.
// 2020: LayerNorm inside each residual branch, one more at the top), which trains without a warm-up schedule.
//   encoder layer:  x += Drop(SelfAttn(LN(x)));                          x += Drop(FF(LN(x)))
//   decoder layer:  x += Drop(CausalSelfAttn(LN(x)));  x += Drop(CrossAttn(LN(x), encoder));  x += Drop(FF(LN(x)))
// with FF(x) = W2 relu(W1 x + b1) + b2. The width is model.hidden_dim; word order enters only through the
// positions added to the input (model.{encoder,decoder}.positions).
#pragma once
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "model/dropout.h"
#include "model/attention.h"
#include "model/linear.h"

namespace attnmt {

// PE(p, 2i) = sin(p / 10000^(2i/dim)), PE(p, 2i+1) = cos(p / 10000^(2i/dim)) for p = first .. first+length-1: [length, dim].
torch::Tensor sinusoidal_positions(int64_t first, int64_t length, int64_t dim, const torch::TensorOptions& options);

// [T, S] bool, true where key s may be seen by query t when the T queries sit at positions offset .. offset+T-1:
// s <= offset + t.
torch::Tensor causal_mask(int64_t T, int64_t S, int64_t offset, const torch::Device& device);

// Adds position information to x [B, T, D] at positions first .. first+T-1 (none: x unchanged). Learned
// positions are a table of kMaxLearned vectors; positions beyond it reuse the last one.
class PositionEncodingImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kMaxLearned = 1024;
  PositionEncodingImpl(Positions kind, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x, int64_t first = 0);

 private:
  Positions kind_;
  int64_t dim_;
  torch::nn::Embedding table{nullptr};
  // The sinusoids of positions 0 .. sinusoids_.size(0)-1 in the dtype and on the device of the last x, made once
  // there (not at every decoding step); rebuilt when x moves or asks for more positions.
  torch::Tensor sinusoids_;
};
TORCH_MODULE(PositionEncoding);

// Each layer's keys and values of the target prefix, kept between decoding steps (incremental decoding). Without
// gradients they live in buffers of `reserved` positions (or more, doubling when full) written in place, so that a
// step copies only its own keys and values; with gradients (teacher forcing below 1 in training) the prefix grows
// by concatenation, which autograd can follow.
struct SelfAttentionCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, heads, capacity, d]; positions 0 .. length-1 hold the prefix
  int64_t length = 0;                       // t: positions already decoded
  int64_t reserved = 0;                     // the capacity of the first buffers (a search's step limit), 0: 16
  SelfAttentionCache index_select(const torch::Tensor& rows) const;
  // Appends layer l's keys and values of T new positions [B, heads, T, d] (length unchanged: the decoder advances it
  // after its last layer) and returns the layer's whole prefix, new positions included, as views [B, heads, length+T, d].
  std::pair<torch::Tensor, torch::Tensor> append(size_t l, const torch::Tensor& k, const torch::Tensor& v);
};

struct SelfAttentionOutput {
  torch::Tensor states;                     // [B, T, D] after the final LayerNorm
  std::vector<torch::Tensor> self_weights;  // per layer [B, heads, T, S_self] (rows sum to 1, 0 where masked)
  torch::Tensor cross_weights;              // decoder: the last layer's cross-attention [B, T, S] (mean of heads)
  torch::Tensor cross_head_weights;         // decoder: [B, cross heads, T, S]
};

// One pre-norm encoder layer: x += Drop(SelfAttn(LN1(x), mask)); x += Drop(FF(LN2(x))).
class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl(int64_t dim, int64_t heads, int64_t ff_dim, Dropout drop);
  // x [B, S, D], mask [B, S] (padding is no key); the self-attention weights [B, heads, S, S] into *weights if asked.
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask, torch::Tensor* weights = nullptr);

  std::shared_ptr<MultiHeadAttention> self_attn;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Linear ff1{nullptr}, ff2{nullptr};  // FF(x) = W2 relu(W1 x + b1) + b2
  Dropout drop{nullptr};
};
TORCH_MODULE(EncoderLayer);

// One pre-norm decoder layer:
//   x += Drop(CausalSelfAttn(LN1(x)));  x += Drop(CrossAttn(LN2(x), encoder));  x += Drop(FF(LN3(x)))
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(int64_t dim, int64_t heads, int64_t cross_dim, int64_t cross_heads, bool cross_scale, int64_t ff_dim,
                   Dropout drop);
  struct Output {
    torch::Tensor x;              // [B, T, D]
    AttentionOutput self, cross;  // the two attentions' results (weights, heads' weights)
  };
  // x [B, T, D] at positions cache->length .. (0 without a cache); self_mask [B, T, S_self] or undefined (every key);
  // cross: this layer's memory of the encoder states (prepared by cross_attn). With a cache, the new positions' keys and
  // values are appended to layer `index`'s prefix and the queries see all of it.
  Output forward(torch::Tensor x, const torch::Tensor& self_mask, const AttentionMemory& cross, SelfAttentionCache* cache,
                 size_t index);

  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  Linear ff1{nullptr}, ff2{nullptr};
  Dropout drop{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The stacks below own their layers but register each layer's parts under the names checkpoints have carried since
// the first self-attention model (self_attn<l>, cross_attn<l>, norms1.<l>, ff1.<l>, ...), not as "layers.<l>.*":
// older checkpoints load as they are, and the order of the parameters, which the optimiser's saved state and the
// gradient norm's sum follow, is the one earlier versions trained with (same seed, same losses).

// The self-attention encoder: embeddings [B, S, E] (projected to D = hidden_dim when E differs) plus positions,
// then model.encoder_layers layers. Padded positions get weight exactly 0 as keys.
class SelfAttentionEncoderImpl : public torch::nn::Module {
 public:
  SelfAttentionEncoderImpl(const ModelConfig& cfg);
  SelfAttentionOutput forward(const torch::Tensor& emb, const torch::Tensor& mask);
  const std::vector<EncoderLayer>& layers() const { return layers_; }

 private:
  Linear input{nullptr};  // E -> D, only when they differ
  PositionEncoding positions{nullptr};
  std::vector<EncoderLayer> layers_;
  torch::nn::LayerNorm final_norm{nullptr};
  Dropout drop{nullptr};
};
TORCH_MODULE(SelfAttentionEncoder);

// The self-attention decoder: causally masked self-attention over the target prefix, cross-attention to the
// encoder states (scaled dot-product, model.attention.heads / dim / scale / mask), feed-forward.
class SelfAttentionDecoderImpl : public torch::nn::Module {
 public:
  SelfAttentionDecoderImpl(const ModelConfig& cfg);
  // Each layer's cross-attention keys and values of the encoder states, projected once per batch: mem.layers.
  AttentionMemory prepare(const torch::Tensor& enc_states, const torch::Tensor& mask);
  // emb [B, T, E]: the target embeddings at positions cache->length .. (0 without a cache). Without a cache, one
  // teacher-forced pass over all T positions (causally masked unless model.decoder.causal_mask is false); with
  // one, the new positions attend to the cached prefix and themselves, and the cache grows by T. target_mask [B, T] bool
  // (without a cache): the real target positions; padding then gets weight 0 as a key even without the causal mask.
  SelfAttentionOutput forward(const torch::Tensor& emb, const AttentionMemory& mem, SelfAttentionCache* cache = nullptr,
                              const torch::Tensor& target_mask = {});
  // The last layer's cross-attention (the lab's instrumentation hooks).
  AttentionImpl* cross_attention() const { return layers_.back()->cross_attn.get(); }
  int64_t cross_heads() const { return layers_.back()->cross_attn->heads(); }
  const std::vector<DecoderLayer>& layers() const { return layers_; }

 private:
  // The self-attention mask of T new positions after `first` cached ones (undefined: every key).
  torch::Tensor self_mask(int64_t B, int64_t T, int64_t first, bool cached, const torch::Tensor& target_mask,
                          const torch::Device& device) const;

  bool causal_;
  Linear input{nullptr};
  PositionEncoding positions{nullptr};
  std::vector<DecoderLayer> layers_;
  torch::nn::LayerNorm final_norm{nullptr};
  Dropout drop{nullptr};
};
TORCH_MODULE(SelfAttentionDecoder);

// Feed-forward size of a stack (ff_dim, or 4 x hidden_dim when it is 0).
int64_t effective_ff_dim(const ModelConfig& m, const StackConfig& s);

}  // namespace attnmt
