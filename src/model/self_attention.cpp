#include "model/self_attention.h"

#include "common/precision.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "kernels/packed_product.h"

namespace attnmt {

torch::Tensor sinusoidal_positions(int64_t first, int64_t length, int64_t dim, const torch::TensorOptions& options) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  torch::Tensor p = torch::arange(first, first + length, f64).unsqueeze(1);                 // [L, 1]
  torch::Tensor i2 = torch::arange(0, dim, 2, f64);                                         // 2i
  torch::Tensor angle = p * torch::exp(i2 * (-std::log(10000.0) / static_cast<double>(dim)));  // p / 10000^(2i/dim)
  torch::Tensor pe = torch::zeros({length, dim}, f64);
  pe.slice(1, 0, dim, 2) = torch::sin(angle);
  pe.slice(1, 1, dim, 2) = torch::cos(angle.slice(1, 0, dim / 2));
  return pe.to(options);
}

torch::Tensor causal_mask(int64_t T, int64_t S, int64_t offset, const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
  return torch::arange(S, i64).unsqueeze(0).le(torch::arange(offset, offset + T, i64).unsqueeze(1));  // [T, S]
}

PositionEncodingImpl::PositionEncodingImpl(Positions kind, int64_t dim) : kind_(kind), dim_(dim) {
  if (kind == Positions::kLearned) {
    table = register_module("table", torch::nn::Embedding(kMaxLearned, dim));
    torch::NoGradGuard ng;
    table->weight.normal_(0.0, 0.1);  // small beside the embeddings, as the sinusoids' mean square (0.5) is
  }
}

torch::Tensor PositionEncodingImpl::forward(const torch::Tensor& x, int64_t first) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == dim_, "PositionEncoding: x must be [B, T, ", dim_, "], got ", x.sizes());
  const int64_t T = x.size(1);
  switch (kind_) {
    case Positions::kNone: return x;
    case Positions::kSinusoidal: {
      if (!sinusoids_.defined() || sinusoids_.size(0) < first + T || sinusoids_.device() != x.device() ||
          sinusoids_.scalar_type() != x.scalar_type())
        sinusoids_ = sinusoidal_positions(0, std::max<int64_t>(first + T, 256), dim_, x.options());
      return x + sinusoids_.narrow(0, first, T).unsqueeze(0);
    }
    case Positions::kLearned: {
      if (first + T <= kMaxLearned) return x + table->weight.narrow(0, first, T).unsqueeze(0);
      torch::Tensor pos = torch::arange(first, first + T, torch::TensorOptions().dtype(torch::kLong).device(x.device()))
                              .clamp_max(kMaxLearned - 1);  // beyond the table: its last vector
      return x + table(pos).unsqueeze(0);
    }
  }
  return x;
}

SelfAttentionCache SelfAttentionCache::index_select(const torch::Tensor& rows) const {
  SelfAttentionCache c;
  c.length = length;
  c.reserved = reserved;
  for (const auto& k : keys) c.keys.push_back(k.index_select(0, rows));
  for (const auto& v : values) c.values.push_back(v.index_select(0, rows));
  return c;
}

std::pair<torch::Tensor, torch::Tensor> SelfAttentionCache::append(size_t l, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(l <= keys.size() && keys.size() == values.size(), "SelfAttentionCache: layer ", l, " after ", keys.size());
  TORCH_CHECK(l < keys.size() || length == 0, "SelfAttentionCache: length ", length, " without keys for layer ", l);
  const int64_t T = k.size(2), end = length + T;
  if (torch::GradMode::is_enabled()) {  // autograd follows a concatenation, not a write into a buffer
    if (l == keys.size()) {
      keys.push_back(k);
      values.push_back(v);
    } else {
      keys[l] = torch::cat({keys[l].narrow(2, 0, length), k}, 2);
      values[l] = torch::cat({values[l].narrow(2, 0, length), v}, 2);
    }
    return {keys[l], values[l]};
  }
  auto write = [&](std::vector<torch::Tensor>& buffers, const torch::Tensor& x) {
    if (l == buffers.size() || buffers[l].size(2) < end) {  // a first or a larger buffer: twice the positions
      const int64_t old = l < buffers.size() ? buffers[l].size(2) : 0;
      torch::Tensor grown = torch::empty({x.size(0), x.size(1), std::max({end, 2 * old, reserved > 0 ? reserved : 16}), x.size(3)},
                                         x.options());
      if (length > 0) grown.narrow(2, 0, length).copy_(buffers[l].narrow(2, 0, length));
      if (l == buffers.size()) buffers.push_back(grown);
      else buffers[l] = grown;
    }
    buffers[l].narrow(2, length, T).copy_(x);
    return buffers[l].narrow(2, 0, end);
  };
  torch::Tensor kk = write(keys, k);
  return {kk, write(values, v)};
}

int64_t effective_ff_dim(const ModelConfig& m, const StackConfig& s) { return s.ff_dim > 0 ? s.ff_dim : 4 * m.hidden_dim; }

namespace {
torch::nn::LayerNorm layer_norm(int64_t d) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})); }
// Layer normalisation in float32, whatever autocast made of x (as autocast itself does on CUDA; on a CPU LibTorch 1.13
// normalises a bfloat16 x with float32 weights not at all).
torch::Tensor normed(torch::nn::LayerNormImpl& norm, const torch::Tensor& x) {
  return norm.forward(float_if_reduced(x));
}
// W2 relu(W1 x + b1) + b2
torch::Tensor feed_forward(torch::nn::Module& w1, torch::nn::Module& w2, const torch::Tensor& x) {
  auto& l1 = dynamic_cast<LinearImpl&>(w1);
  auto& l2 = dynamic_cast<LinearImpl&>(w2);
  return l2.forward(torch::relu(l1.forward(x)));
}
// Projects E-wide embeddings to the stack's width D (when E differs) and adds the positions.
torch::Tensor stack_input(Linear& input, PositionEncoding& positions, const torch::Tensor& emb, int64_t first) {
  torch::Tensor x = input ? input(emb) : emb;
  return positions(x, first);
}
}  // namespace

SelfAttentionEncoderImpl::SelfAttentionEncoderImpl(const ModelConfig& cfg) : dim_(cfg.hidden_dim) {
  const int64_t D = cfg.hidden_dim, F = effective_ff_dim(cfg, cfg.encoder);
  if (cfg.embed_dim != D) input = register_module("input", Linear(cfg.embed_dim, D));
  positions = register_module("positions", PositionEncoding(cfg.encoder.positions, D));
  norms1 = register_module("norms1", torch::nn::ModuleList());
  norms2 = register_module("norms2", torch::nn::ModuleList());
  ff1 = register_module("ff1", torch::nn::ModuleList());
  ff2 = register_module("ff2", torch::nn::ModuleList());
  for (int l = 0; l < cfg.encoder_layers; ++l) {
    self_attn_.push_back(register_module("self_attn" + std::to_string(l),
                                         std::make_shared<MultiHeadAttention>(D, D, D, cfg.encoder.heads)));
    norms1->push_back(layer_norm(D));
    norms2->push_back(layer_norm(D));
    ff1->push_back(Linear(D, F));
    ff2->push_back(Linear(F, D));
  }
  final_norm = register_module("final_norm", layer_norm(D));
  drop = register_module("drop", Dropout(cfg.dropout));
}

SelfAttentionOutput SelfAttentionEncoderImpl::forward(const torch::Tensor& emb, const torch::Tensor& mask) {
  TORCH_CHECK(emb.dim() == 3, "SelfAttentionEncoder: embeddings must be [B, S, E], got ", emb.sizes());
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == emb.size(0) && mask.size(1) == emb.size(1),
              "SelfAttentionEncoder: mask must be [B, S], got ", mask.sizes());
  SelfAttentionOutput o;
  torch::Tensor x = stack_input(input, positions, emb, 0);  // [B, S, D]
  for (size_t l = 0; l < self_attn_.size(); ++l) {
    torch::Tensor h = normed(*norms1[l]->as<torch::nn::LayerNorm>(), x);
    AttentionOutput a = self_attn_[l]->attend(h, self_attn_[l]->prepare(h, mask));  // queries, keys, values: one sequence
    o.self_weights.push_back(a.head_weights);                                      // [B, h, S, S]
    x = x + drop(a.context);
    x = x + drop(feed_forward(*ff1[l], *ff2[l], normed(*norms2[l]->as<torch::nn::LayerNorm>(), x)));
  }
  o.states = normed(*final_norm, x);
  return o;
}

SelfAttentionDecoderImpl::SelfAttentionDecoderImpl(const ModelConfig& cfg)
    : dim_(cfg.hidden_dim), causal_(cfg.decoder.causal_mask) {
  const int64_t D = cfg.hidden_dim, F = effective_ff_dim(cfg, cfg.decoder), A = effective_attention_dim(cfg);
  if (cfg.embed_dim != D) input = register_module("input", Linear(cfg.embed_dim, D));
  positions = register_module("positions", PositionEncoding(cfg.decoder.positions, D));
  norms1 = register_module("norms1", torch::nn::ModuleList());
  norms2 = register_module("norms2", torch::nn::ModuleList());
  norms3 = register_module("norms3", torch::nn::ModuleList());
  ff1 = register_module("ff1", torch::nn::ModuleList());
  ff2 = register_module("ff2", torch::nn::ModuleList());
  for (int l = 0; l < cfg.decoder_layers; ++l) {
    const std::string n = std::to_string(l);
    self_attn_.push_back(register_module("self_attn" + n, std::make_shared<MultiHeadAttention>(D, D, D, cfg.decoder.heads)));
    cross_attn_.push_back(register_module(
        "cross_attn" + n, std::make_shared<MultiHeadAttention>(D, D, A, cfg.attention.heads, cfg.attention.scale)));
    norms1->push_back(layer_norm(D));
    norms2->push_back(layer_norm(D));
    norms3->push_back(layer_norm(D));
    ff1->push_back(Linear(D, F));
    ff2->push_back(Linear(F, D));
  }
  final_norm = register_module("final_norm", layer_norm(D));
  drop = register_module("drop", Dropout(cfg.dropout));
}

AttentionMemory SelfAttentionDecoderImpl::prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) {
  AttentionMemory mem;
  mem.mask = mask;
  const torch::Tensor blocked = mask.logical_not();  // once per batch for every layer and step
  for (const auto& c : cross_attn_) {
    mem.layers.push_back(c->prepare(enc_states, mask));
    mem.layers.back().blocked = blocked;
  }
  return mem;
}

SelfAttentionOutput SelfAttentionDecoderImpl::forward(const torch::Tensor& emb, const AttentionMemory& mem,
                                                      SelfAttentionCache* cache, const torch::Tensor& target_mask) {
  TORCH_CHECK(emb.dim() == 3 && emb.size(0) == mem.mask.size(0), "SelfAttentionDecoder: embeddings must be [B, T, E] with B ",
              mem.mask.size(0), ", got ", emb.sizes());
  TORCH_CHECK(mem.layers.size() == cross_attn_.size(), "SelfAttentionDecoder: memory of ", mem.layers.size(), " layers, expected ",
              cross_attn_.size(), " (prepare() it with this decoder)");
  const int64_t B = emb.size(0), T = emb.size(1), first = cache ? cache->length : 0, S_self = first + T;
  TORCH_CHECK(!target_mask.defined() || (!cache && target_mask.sizes() == torch::IntArrayRef({B, T})),
              "SelfAttentionDecoder: target_mask must be [B, T] = [", B, ", ", T, "] and without a cache, got ", target_mask.sizes());
  // The self-attention mask over the prefix and the new positions: causal, or everything (the pitfall); padded target
  // positions are no keys (under the causal mask a real position never sees them anyway: padding follows the words).
  // One new position after a cached prefix sees all of it and itself either way: no mask.
  torch::Tensor self_mask;
  if (causal_ && !(cache && T == 1)) self_mask = causal_mask(T, S_self, first, emb.device()).unsqueeze(0).expand({B, T, S_self});
  if (target_mask.defined()) self_mask = self_mask.defined() ? self_mask.logical_and(target_mask.unsqueeze(1))
                                                             : target_mask.unsqueeze(1).expand({B, T, S_self});
  SelfAttentionOutput o;
  torch::Tensor x = stack_input(input, positions, emb, first);  // [B, T, D]
  for (size_t l = 0; l < self_attn_.size(); ++l) {
    torch::Tensor h = normed(*norms1[l]->as<torch::nn::LayerNorm>(), x);
    AttentionMemory self = self_attn_[l]->keys_values(h);  // K, V of the new positions [B, h, T, d]
    if (cache) std::tie(self.keys, self.values) = cache->append(l, self.keys, self.values);  // [B, h, first + T, d]
    self.mask = self_mask;
    AttentionOutput a = self_attn_[l]->attend(h, self);
    o.self_weights.push_back(a.head_weights);  // [B, h, T, first + T]
    x = x + drop(a.context);
    AttentionOutput c = cross_attn_[l]->attend(normed(*norms2[l]->as<torch::nn::LayerNorm>(), x), mem.layers[l]);
    x = x + drop(c.context);
    x = x + drop(feed_forward(*ff1[l], *ff2[l], normed(*norms3[l]->as<torch::nn::LayerNorm>(), x)));
    if (l + 1 == self_attn_.size()) {
      o.cross_weights = c.weights;
      o.cross_head_weights = c.head_weights;
    }
  }
  if (cache) cache->length += T;
  o.states = normed(*final_norm, x);
  return o;
}

}  // namespace attnmt
