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
torch::Tensor normed(torch::nn::LayerNorm& norm, const torch::Tensor& x) { return norm(float_if_reduced(x)); }
// W2 relu(W1 x + b1) + b2
torch::Tensor feed_forward(Linear& w1, Linear& w2, const torch::Tensor& x) { return w2(torch::relu(w1(x))); }
// Projects E-wide embeddings to the stack's width D (when E differs) and adds the positions.
torch::Tensor stack_input(Linear& input, PositionEncoding& positions, const torch::Tensor& emb, int64_t first) {
  torch::Tensor x = input ? input(emb) : emb;
  return positions(x, first);
}
}  // namespace

EncoderLayerImpl::EncoderLayerImpl(int64_t dim, int64_t heads, int64_t ff_dim, Dropout dropout) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(dim, dim, dim, heads));
  norm1 = register_module("norm1", layer_norm(dim));
  norm2 = register_module("norm2", layer_norm(dim));
  ff1 = register_module("ff1", Linear(dim, ff_dim));
  ff2 = register_module("ff2", Linear(ff_dim, dim));
  drop = register_module("drop", std::move(dropout));
}

torch::Tensor EncoderLayerImpl::forward(torch::Tensor x, const torch::Tensor& mask, torch::Tensor* weights) {
  torch::Tensor h = normed(norm1, x);
  AttentionOutput a = self_attn->forward(h, h, mask);  // queries, keys and values from one sequence
  if (weights) *weights = a.head_weights;             // [B, h, S, S]
  x = x + drop(a.context);
  return x + drop(feed_forward(ff1, ff2, normed(norm2, x)));
}

DecoderLayerImpl::DecoderLayerImpl(int64_t dim, int64_t heads, int64_t cross_dim, int64_t cross_heads, bool cross_scale,
                                   int64_t ff_dim, Dropout dropout) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(dim, dim, dim, heads));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(dim, dim, cross_dim, cross_heads, cross_scale));
  norm1 = register_module("norm1", layer_norm(dim));
  norm2 = register_module("norm2", layer_norm(dim));
  norm3 = register_module("norm3", layer_norm(dim));
  ff1 = register_module("ff1", Linear(dim, ff_dim));
  ff2 = register_module("ff2", Linear(ff_dim, dim));
  drop = register_module("drop", std::move(dropout));
}

DecoderLayerImpl::Output DecoderLayerImpl::forward(torch::Tensor x, const torch::Tensor& self_mask, const AttentionMemory& cross,
                                                   SelfAttentionCache* cache, size_t index) {
  Output o;
  torch::Tensor h = normed(norm1, x);
  AttentionMemory self = self_attn->keys_values(h);  // K, V of the new positions [B, h, T, d]
  if (cache) std::tie(self.keys, self.values) = cache->append(index, self.keys, self.values);  // the prefix's and theirs
  self.mask = self_mask;
  o.self = self_attn->attend(h, self);
  x = x + drop(o.self.context);
  o.cross = cross_attn->attend(normed(norm2, x), cross);
  x = x + drop(o.cross.context);
  o.x = x + drop(feed_forward(ff1, ff2, normed(norm3, x)));
  return o;
}

SelfAttentionEncoderImpl::SelfAttentionEncoderImpl(const ModelConfig& cfg) {
  const int64_t D = cfg.hidden_dim, F = effective_ff_dim(cfg, cfg.encoder);
  if (cfg.embed_dim != D) input = register_module("input", Linear(cfg.embed_dim, D));
  positions = register_module("positions", PositionEncoding(cfg.encoder.positions, D));
  auto norms1 = register_module("norms1", torch::nn::ModuleList()), norms2 = register_module("norms2", torch::nn::ModuleList());
  auto ff1 = register_module("ff1", torch::nn::ModuleList()), ff2 = register_module("ff2", torch::nn::ModuleList());
  drop = Dropout(cfg.dropout);
  for (int l = 0; l < cfg.encoder_layers; ++l) {
    layers_.emplace_back(D, cfg.encoder.heads, F, drop);
    const EncoderLayer& layer = layers_.back();
    register_module("self_attn" + std::to_string(l), layer->self_attn);  // the checkpoints' names (see the header)
    norms1->push_back(layer->norm1);
    norms2->push_back(layer->norm2);
    ff1->push_back(layer->ff1);
    ff2->push_back(layer->ff2);
  }
  final_norm = register_module("final_norm", layer_norm(D));
  register_module("drop", drop);
}

SelfAttentionOutput SelfAttentionEncoderImpl::forward(const torch::Tensor& emb, const torch::Tensor& mask) {
  TORCH_CHECK(emb.dim() == 3, "SelfAttentionEncoder: embeddings must be [B, S, E], got ", emb.sizes());
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == emb.size(0) && mask.size(1) == emb.size(1),
              "SelfAttentionEncoder: mask must be [B, S], got ", mask.sizes());
  SelfAttentionOutput o;
  torch::Tensor x = stack_input(input, positions, emb, 0);  // [B, S, D]
  for (auto& layer : layers_) {
    o.self_weights.emplace_back();
    x = layer->forward(x, mask, &o.self_weights.back());
  }
  o.states = normed(final_norm, x);
  return o;
}

SelfAttentionDecoderImpl::SelfAttentionDecoderImpl(const ModelConfig& cfg) : causal_(cfg.decoder.causal_mask) {
  const int64_t D = cfg.hidden_dim, F = effective_ff_dim(cfg, cfg.decoder), A = effective_attention_dim(cfg);
  if (cfg.embed_dim != D) input = register_module("input", Linear(cfg.embed_dim, D));
  positions = register_module("positions", PositionEncoding(cfg.decoder.positions, D));
  auto norms1 = register_module("norms1", torch::nn::ModuleList()), norms2 = register_module("norms2", torch::nn::ModuleList());
  auto norms3 = register_module("norms3", torch::nn::ModuleList());
  auto ff1 = register_module("ff1", torch::nn::ModuleList()), ff2 = register_module("ff2", torch::nn::ModuleList());
  drop = Dropout(cfg.dropout);
  for (int l = 0; l < cfg.decoder_layers; ++l) {
    layers_.emplace_back(D, cfg.decoder.heads, A, cfg.attention.heads, cfg.attention.scale, F, drop);
    const DecoderLayer& layer = layers_.back();
    register_module("self_attn" + std::to_string(l), layer->self_attn);  // the checkpoints' names (see the header)
    register_module("cross_attn" + std::to_string(l), layer->cross_attn);
    norms1->push_back(layer->norm1);
    norms2->push_back(layer->norm2);
    norms3->push_back(layer->norm3);
    ff1->push_back(layer->ff1);
    ff2->push_back(layer->ff2);
  }
  final_norm = register_module("final_norm", layer_norm(D));
  register_module("drop", drop);
}

AttentionMemory SelfAttentionDecoderImpl::prepare(const torch::Tensor& enc_states, const torch::Tensor& mask) {
  AttentionMemory mem;
  mem.mask = mask;
  const torch::Tensor blocked = mask.logical_not();  // once per batch for every layer and step
  for (const auto& layer : layers_) {
    mem.layers.push_back(layer->cross_attn->prepare(enc_states, mask));
    mem.layers.back().blocked = blocked;
  }
  return mem;
}

// Causal, or everything (the pitfall); padded target positions are no keys (under the causal mask a real position
// never sees them anyway: padding follows the words). One new position after a cached prefix sees all of it and
// itself either way: no mask.
torch::Tensor SelfAttentionDecoderImpl::self_mask(int64_t B, int64_t T, int64_t first, bool cached,
                                                  const torch::Tensor& target_mask, const torch::Device& device) const {
  const int64_t S_self = first + T;
  torch::Tensor m;
  if (causal_ && !(cached && T == 1)) m = causal_mask(T, S_self, first, device).unsqueeze(0).expand({B, T, S_self});
  if (target_mask.defined())
    m = m.defined() ? m.logical_and(target_mask.unsqueeze(1)) : target_mask.unsqueeze(1).expand({B, T, S_self});
  return m;
}

SelfAttentionOutput SelfAttentionDecoderImpl::forward(const torch::Tensor& emb, const AttentionMemory& mem,
                                                      SelfAttentionCache* cache, const torch::Tensor& target_mask) {
  TORCH_CHECK(emb.dim() == 3 && emb.size(0) == mem.mask.size(0), "SelfAttentionDecoder: embeddings must be [B, T, E] with B ",
              mem.mask.size(0), ", got ", emb.sizes());
  TORCH_CHECK(mem.layers.size() == layers_.size(), "SelfAttentionDecoder: memory of ", mem.layers.size(), " layers, expected ",
              layers_.size(), " (prepare() it with this decoder)");
  const int64_t B = emb.size(0), T = emb.size(1), first = cache ? cache->length : 0;
  TORCH_CHECK(!target_mask.defined() || (!cache && target_mask.sizes() == torch::IntArrayRef({B, T})),
              "SelfAttentionDecoder: target_mask must be [B, T] = [", B, ", ", T, "] and without a cache, got ", target_mask.sizes());
  const torch::Tensor mask = self_mask(B, T, first, cache != nullptr, target_mask, emb.device());
  SelfAttentionOutput o;
  torch::Tensor x = stack_input(input, positions, emb, first);  // [B, T, D]
  for (size_t l = 0; l < layers_.size(); ++l) {
    DecoderLayerImpl::Output out = layers_[l]->forward(x, mask, mem.layers[l], cache, l);
    x = out.x;
    o.self_weights.push_back(out.self.head_weights);  // [B, h, T, first + T]
    if (l + 1 == layers_.size()) {
      o.cross_weights = out.cross.weights;
      o.cross_head_weights = out.cross.head_weights;
    }
  }
  if (cache) cache->length += T;
  o.states = normed(final_norm, x);
  return o;
}

}  // namespace attnmt
