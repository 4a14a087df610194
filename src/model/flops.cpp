#include "model/flops.h"

#include "model/attention.h"
#include "model/decoder.h"
#include "model/self_attention.h"

namespace attnmt {

namespace {
// Multiply-adds of a GRU (3 gates) or LSTM (4 gates) layer per token: gates x hidden x (input + hidden).
double rnn_macs(RnnCell cell, double in, double hidden) {
  return (cell == RnnCell::kLstm ? 4.0 : 3.0) * hidden * (in + hidden);
}
}  // namespace

FlopCount count_flops(const ModelConfig& m, int64_t tgt_vocab, int64_t B, int64_t S, int64_t T) {
  const double E = m.embed_dim, H = m.hidden_dim, A = effective_attention_dim(m), V = static_cast<double>(tgt_vocab);
  const double dirs = m.bidirectional ? 2 : 1, h = H / dirs;
  const double src_tokens = static_cast<double>(B * S), steps = static_cast<double>(B * T);
  FlopCount f;
  const double Sd = static_cast<double>(S), Td = static_cast<double>(T);
  double enc = 0;
  if (m.encoder.type == LayerType::kSelfAttention) {
    // per token and layer: Q, K, V, O projections (4 H^2), scores and context over S keys (2 S H), feed-forward (2 H F)
    const double F = static_cast<double>(effective_ff_dim(m, m.encoder));
    enc = (E != H ? E * H : 0) + m.encoder_layers * (4 * H * H + 2 * Sd * H + 2 * H * F);
  } else {
    for (int l = 0; l < m.encoder_layers; ++l) enc += dirs * rnn_macs(m.rnn, l == 0 ? E : H, h);
  }
  f.encoder = 2 * enc * src_tokens;
  if (m.decoder.type == LayerType::kSelfAttention) {
    // per target token and layer: causal self-attention as computed (the whole T x T matrix), cross-attention
    // (Q and O projections, scores and context over S), feed-forward; K and V of the encoder states once per layer.
    const double F = static_cast<double>(effective_ff_dim(m, m.decoder));
    f.keys = 2 * src_tokens * 2 * H * A * m.decoder_layers;
    const double per_token = (E != H ? E * H : 0) + m.decoder_layers * (4 * H * H + 2 * Td * H + 2 * H * A + 2 * Sd * A + 2 * H * F);
    f.decoder = 2 * per_token * steps;
    f.output = 2 * H * V * steps;
    return f;
  }
  f.bridge = 2 * static_cast<double>(B) * H * H * m.decoder_layers * (m.rnn == RnnCell::kLstm ? 2 : 1);
  const DecoderDims dims = decoder_dims(m);
  const double rnn_in = static_cast<double>(dims.rnn_input);
  double step = 0;
  for (int l = 0; l < m.decoder_layers; ++l) step += rnn_macs(m.rnn, l == 0 ? rnn_in : H, H);
  const AttentionMacs att = attention_macs(m.attention, H, A, Sd);
  f.keys = 2 * src_tokens * att.per_source_token;
  step += att.per_step;
  step += static_cast<double>(dims.readout_input) * H;  // attentional state / readout
  f.decoder = 2 * step * steps;
  f.output = 2 * H * V * steps;
  return f;
}

}  // namespace attnmt
