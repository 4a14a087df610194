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

// The self-attention encoder: embeddings [B, S, E] (projected to D = hidden_dim when E differs) plus positions,
// then model.encoder_layers layers. Padded positions get weight exactly 0 as keys.
class SelfAttentionEncoderImpl : public torch::nn::Module {
 public:
  SelfAttentionEncoderImpl(const ModelConfig& cfg);
  SelfAttentionOutput forward(const torch::Tensor& emb, const torch::Tensor& mask);

 private:
  int64_t dim_;
  Linear input{nullptr};  // E -> D, only when they differ
  PositionEncoding positions{nullptr};
  std::vector<std::shared_ptr<MultiHeadAttention>> self_attn_;
  torch::nn::ModuleList norms1, norms2, ff1, ff2;
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
  AttentionImpl* cross_attention() const { return cross_attn_.back().get(); }
  int64_t cross_heads() const { return cross_attn_.back()->heads(); }

 private:
  int64_t dim_;
  bool causal_;
  Linear input{nullptr};
  PositionEncoding positions{nullptr};
  std::vector<std::shared_ptr<MultiHeadAttention>> self_attn_, cross_attn_;
  torch::nn::ModuleList norms1, norms2, norms3, ff1, ff2;
  torch::nn::LayerNorm final_norm{nullptr};
  Dropout drop{nullptr};
};
TORCH_MODULE(SelfAttentionDecoder);

// Feed-forward size of a stack (ff_dim, or 4 x hidden_dim when it is 0).
int64_t effective_ff_dim(const ModelConfig& m, const StackConfig& s);

}  // namespace attnmt
