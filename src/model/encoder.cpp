#include "model/encoder.h"

#include "common/host.h"

#include "data/special_tokens.h"

namespace attnmt {

EncoderImpl::EncoderImpl(const ModelConfig& cfg, int64_t vocab)
    : bidirectional_(cfg.bidirectional), layers_(cfg.encoder_layers), lstm_(cfg.rnn == RnnCell::kLstm) {
  embed = register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, cfg.embed_dim).padding_idx(kPadId)));
  drop = register_module("drop", Dropout(cfg.dropout));
  if (cfg.encoder.type == LayerType::kSelfAttention) {
    self_attention = register_module("self_attention", SelfAttentionEncoder(cfg));
    return;
  }
  int64_t per_dir = cfg.bidirectional ? cfg.hidden_dim / 2 : cfg.hidden_dim;
  rnn = register_module("rnn", Rnn(cfg.rnn, cfg.embed_dim, per_dir, cfg.encoder_layers, cfg.dropout, cfg.bidirectional));
}

EncoderOutput EncoderImpl::forward(const torch::Tensor& src, const torch::Tensor& lengths, const torch::Tensor& mask) {
  TORCH_CHECK(src.dim() == 2, "Encoder: src must be [B, S], got ", src.sizes());
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == src.size(0), "Encoder: lengths must be [B], got ", lengths.sizes());
  TORCH_CHECK(mask.sizes() == src.sizes(), "Encoder: mask must match src, got ", mask.sizes());
  return from_embeddings(embed(src), lengths, mask);
}

EncoderOutput EncoderImpl::from_embeddings(const torch::Tensor& emb, const torch::Tensor& lengths, const torch::Tensor& mask) {
  TORCH_CHECK(emb.dim() == 3 && emb.size(2) == embed->weight.size(1), "Encoder: embeddings must be [B, S, ", embed->weight.size(1),
              "], got ", emb.sizes());
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == emb.size(0), "Encoder: lengths must be [B], got ", lengths.sizes());
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == emb.size(0) && mask.size(1) == emb.size(1), "Encoder: mask must be [B, S], got ",
              mask.sizes());
  for (int64_t n : cpu_vector<int64_t>(lengths)) TORCH_CHECK(n >= 1, "Encoder: every source sentence needs at least one token");
  torch::Tensor x = drop(emb);                            // [B, S, E]
  if (self_attention) {
    SelfAttentionOutput sa = self_attention(x, mask);
    // An RNN decoder starts from the mean of the states over the real positions.
    torch::Tensor m = mask.unsqueeze(2).to(sa.states.scalar_type());
    torch::Tensor mean = (sa.states * m).sum(1) / m.sum(1);
    return {sa.states, mask, mean, lstm_ ? mean : torch::Tensor(), sa.self_weights};
  }
  auto [states, st] = rnn->forward_lengths(x, lengths);   // [B, S, H], h [L*dirs, B, H/dirs]
  auto last = [&](const torch::Tensor& t) {
    if (!t.defined()) return torch::Tensor();
    if (bidirectional_) return torch::cat({t[2 * layers_ - 2], t[2 * layers_ - 1]}, -1);  // [B, H]
    return t[layers_ - 1];
  };
  return {states, mask, last(st.h), last(st.c), {}};
}

}  // namespace attnmt
