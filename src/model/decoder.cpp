#include "model/decoder.h"

#include "common/precision.h"
#include "data/special_tokens.h"
#include "kernels/gru_recurrence.h"
#include "kernels/mode.h"

namespace attnmt {

namespace {
// x without its axis dim, or undefined: weights are left undefined where nobody wants them (attention_maps_wanted).
torch::Tensor squeezed(const torch::Tensor& x, int64_t dim) { return x.defined() ? x.squeeze(dim) : x; }
}  // namespace

DecoderState DecoderState::index_select(const torch::Tensor& rows) const {
  DecoderState s;
  if (rnn.h.defined()) s.rnn = rnn.index_select(rows);
  s.cache = cache.index_select(rows);
  if (feed.defined()) s.feed = feed.index_select(0, rows);
  if (fixed.defined()) s.fixed = fixed.index_select(0, rows);
  return s;
}

DecoderDims decoder_dims(const ModelConfig& cfg) {
  DecoderDims d;
  const int64_t H = cfg.hidden_dim, E = cfg.embed_dim;
  d.luong_style = attention_traits(cfg.attention).after_rnn;
  d.rnn_input = E + ((!d.luong_style || cfg.input_feeding) ? H : 0);
  d.readout_input = d.luong_style ? 2 * H : 2 * H + E;
  return d;
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg, int64_t vocab)
    : luong_style_(decoder_dims(cfg).luong_style),
      input_feeding_(cfg.input_feeding),
      mask_padding_(cfg.attention.mask),
      hidden_(cfg.hidden_dim),
      layers_(cfg.decoder_layers) {
  const int64_t H = cfg.hidden_dim, E = cfg.embed_dim;
  embed = register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, E).padding_idx(kPadId)));
  drop = register_module("drop", Dropout(cfg.dropout));
  if (cfg.tie_output) {  // Press & Wolf 2017: one table for the input embeddings and the output layer
    TORCH_CHECK(H == E, "Decoder: model.tie_output needs hidden_dim == embed_dim, got ", H, " and ", E);
    {
      torch::NoGradGuard no_grad;
      embed->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(E)));  // logits of unit scale at the start
      embed->weight[kPadId].zero_();
    }
    embed_scale_ = std::sqrt(static_cast<double>(E));  // the inputs keep the untied table's N(0, 1)
    out_bias = register_parameter("out_bias", torch::zeros({vocab}));
  }
  auto output_layer = [&] {
    if (!cfg.tie_output) out = register_module("out", Linear(H, vocab));
  };
  if (cfg.decoder.type == LayerType::kSelfAttention) {
    self_attention = register_module("self_attention", SelfAttentionDecoder(cfg));
    output_layer();
    return;
  }
  attention_ = make_attention(cfg);
  if (attention_) register_module("attention", attention_);
  const DecoderDims dims = decoder_dims(cfg);
  rnn = register_module("rnn", Rnn(cfg.rnn, dims.rnn_input, H, cfg.decoder_layers, cfg.dropout, false));
  bridge_h = register_module("bridge_h", Linear(H, H * layers_));
  if (cfg.rnn == RnnCell::kLstm) bridge_c = register_module("bridge_c", Linear(H, H * layers_));
  combine = register_module("combine", Linear(dims.readout_input, H));
  output_layer();
}

DecoderState DecoderImpl::init_state(const EncoderOutput& enc) {
  if (self_attention) return {};  // an empty prefix; the encoder reaches it through cross-attention only
  const Autocast bf16(enc.final_h.device());
  const int64_t B = enc.final_h.size(0);
  auto bridge = [&](Linear& l, const torch::Tensor& x) {  // s_0 = tanh(W_s h_final)
    return torch::tanh(l(x)).view({B, layers_, hidden_}).transpose(0, 1).contiguous();  // [L, B, H]
  };
  DecoderState s;
  s.rnn.h = bridge(bridge_h, enc.final_h);
  if (bridge_c) s.rnn.c = bridge(bridge_c, enc.final_c);
  if (input_feeding_) s.feed = torch::zeros({B, hidden_}, enc.final_h.options());
  if (!attention_) s.fixed = enc.final_h;  // the bottleneck: one vector for the whole sentence
  return s;
}

AttentionMemory DecoderImpl::prepare(const EncoderOutput& enc) {
  if (!attention_ && !self_attention) return {torch::Tensor(), torch::Tensor(), enc.mask, {}, {}};
  // model.attention.mask false (an experiment): every position, padding included, takes part in the softmax.
  const torch::Tensor mask = mask_padding_ ? enc.mask : torch::ones_like(enc.mask);
  const Autocast bf16(enc.states.device());
  if (self_attention) return self_attention->prepare(enc.states, mask);
  AttentionMemory mem = attention_->prepare(enc.states, mask);
  mem.blocked = mem.mask.logical_not();  // once per batch, not at every step
  return mem;
}

DecoderStepOutput DecoderImpl::step(const torch::Tensor& y_prev, DecoderState& state, const AttentionMemory& mem) {
  TORCH_CHECK(y_prev.dim() == 1, "Decoder::step: y_prev must be [B], got ", y_prev.sizes());
  const Autocast bf16(y_prev.device());
  torch::Tensor e = embedded(y_prev);  // [B, E]
  if (self_attention) {  // the new position attends to the cached prefix and itself
    SelfAttentionOutput sa = self_attention(e.unsqueeze(1), mem, &state.cache);
    DecoderStepOutput o;
    o.readout = sa.states.squeeze(1);
    o.weights = squeezed(sa.cross_weights, 1);
    o.head_weights = squeezed(sa.cross_head_weights, 2);
    return o;
  }
  const torch::Tensor top_prev = state.rnn.h[layers_ - 1];  // [B, H]
  DecoderStepOutput o;
  if (luong_style_) {
    torch::Tensor x = input_feeding_ ? torch::cat({e, state.feed}, -1) : e;
    auto [y, st] = rnn->step(x, state.rnn);  // y [B, H]
    state.rnn = st;
    AttentionOutput a = attention_->attend(y.unsqueeze(1), mem);  // queried with the current state
    torch::Tensor ht = torch::tanh(combine(torch::cat({a.context.squeeze(1), y}, -1)));  // h~_t = tanh(W_c [c_t; s_t])  [B, H]
    if (input_feeding_) state.feed = ht;
    o.readout = ht;
    o.weights = squeezed(a.weights, 1);
    o.head_weights = squeezed(a.head_weights, 2);
    return o;
  }
  torch::Tensor ctx;
  if (attention_) {
    AttentionOutput a = attention_->attend(top_prev.unsqueeze(1), mem);  // queried with s_{t-1}
    ctx = a.context.squeeze(1);
    o.weights = squeezed(a.weights, 1);
  } else {
    ctx = state.fixed;
  }
  auto [y, st] = rnn->step(torch::cat({e, ctx}, -1), state.rnn);
  state.rnn = st;
  o.readout = torch::tanh(combine(torch::cat({y, ctx, e}, -1)));  // tanh(W [s_t; c_t; e_t])
  return o;
}

torch::Tensor DecoderImpl::logits(const torch::Tensor& readout) {
  const Autocast bf16(readout.device());
  if (out) return out(drop(readout));
  return linear_product(*this, tied_packed_, drop(readout), embed->weight, out_bias);  // tied: W_o is the embedding table
}

torch::Tensor DecoderImpl::embedded(const torch::Tensor& y) {
  const torch::Tensor e = embed(y);
  return drop(embed_scale_ == 1.0 ? e : e * embed_scale_);
}

namespace {
// [B, T, F] -> [N, F] at the flat positions rows (b * T + t); x unchanged without rows.
torch::Tensor at_rows(const torch::Tensor& x, const torch::Tensor& rows) {
  return rows.defined() ? x.reshape({-1, x.size(2)}).index_select(0, rows) : x;
}
}  // namespace

torch::Tensor DecoderImpl::readout_at(const torch::Tensor& features, const torch::Tensor& rows) {
  return torch::tanh(combine(at_rows(features, rows)));
}

DecoderPath DecoderImpl::path_for(const torch::Device& device, double teacher_forcing, bool stepwise) const {
  if (stepwise || teacher_forcing < 1.0) return DecoderPath::kTokenByToken;
  if (self_attention) return DecoderPath::kSelfAttention;
  if (can_run_all_steps()) return DecoderPath::kAllSteps;
  if (luong_style_) return DecoderPath::kTokenByToken;  // input feeding: each step needs the previous h~
  if (!attention_) return DecoderPath::kFixedContext;
  const bool additive = dynamic_cast<const AdditiveAttention*>(attention_.get()) != nullptr;
  // One autograd node for the whole recurrence: attnmt's CPU kernels, or LibTorch operations on a GPU
  // (kernels/gru_recurrence.h); the stepped path is left for LSTM and stacked decoders.
  if (additive && !rnn->is_lstm() && layers_ == 1) return DecoderPath::kFusedRecurrence;
  return DecoderPath::kSteppedRecurrence;
}

DecoderOutput DecoderImpl::forward(const torch::Tensor& tgt_in, DecoderState state, const AttentionMemory& mem,
                                   double teacher_forcing, bool stepwise, const torch::Tensor& rows) {
  TORCH_CHECK(tgt_in.dim() == 2, "Decoder: tgt_in must be [B, T], got ", tgt_in.sizes());
  TORCH_CHECK(self_attention || state.rnn.h.size(1) == tgt_in.size(0), "Decoder: state batch ", state.rnn.h.size(1),
              " vs target ", tgt_in.size(0));
  TORCH_CHECK(!rows.defined() || (rows.dim() == 1 && rows.scalar_type() == torch::kLong),
              "Decoder: rows must be int64 [N], got ", rows.sizes());
  switch (path_for(tgt_in.device(), teacher_forcing, stepwise)) {
    case DecoderPath::kAllSteps: return forward_all_steps(tgt_in, state, mem, rows);
    case DecoderPath::kFixedContext: return forward_fixed_context(tgt_in, state, rows);
    case DecoderPath::kFusedRecurrence: return forward_fused_recurrence(tgt_in, state, mem, rows);
    case DecoderPath::kSteppedRecurrence: return forward_stepped_recurrence(tgt_in, state, mem, rows);
    case DecoderPath::kSelfAttention: return forward_self_attention(tgt_in, mem, rows);
    case DecoderPath::kTokenByToken: break;
  }
  return forward_token_by_token(tgt_in, state, mem, teacher_forcing, rows);
}

DecoderOutput DecoderImpl::forward_all_steps(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                             const torch::Tensor& rows) {
  // One RNN call over all steps, then attention in batched matmuls.
  torch::Tensor e = embedded(tgt_in);              // [B, T, E]
  auto [y, st] = rnn->forward(e, state.rnn);       // [B, T, H]
  state.rnn = st;
  AttentionOutput a = attention_->attend(y, mem);  // [B, T, H], [B, T, S]
  DecoderOutput o;
  o.readout = readout_at(torch::cat({a.context, y}, -1), rows);
  o.weights = a.weights;
  o.head_weights = a.head_weights;
  return o;
}

// Bahdanau / none: what does not feed back is batched over all steps: embeddings (one lookup and dropout)
// and the readout tanh(W[s_t; c_t; e_t]) (one matmul instead of T small ones).
DecoderOutput DecoderImpl::forward_fixed_context(const torch::Tensor& tgt_in, DecoderState& state, const torch::Tensor& rows) {
  torch::Tensor e_all = embedded(tgt_in);  // [B, T, E]
  // The fixed context is the same at every step: one RNN call over [e_t; c] for all steps.
  torch::Tensor C = state.fixed.unsqueeze(1).expand({-1, tgt_in.size(1), -1});
  auto [Y, st] = rnn->forward(torch::cat({e_all, C}, -1), state.rnn);
  state.rnn = st;
  DecoderOutput o;
  o.readout = readout_at(torch::cat({Y, C, e_all}, -1), rows);
  return o;
}

DecoderOutput DecoderImpl::forward_fused_recurrence(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                                    const torch::Tensor& rows) {
  // One GRU layer with additive attention on the CPU: the stepped recurrence as one autograd node
  // (kernels/gru_recurrence.h).
  torch::Tensor e_all = embedded(tgt_in);  // [B, T, E]
  const auto* additive = dynamic_cast<const AdditiveAttention*>(attention_.get());
  const int64_t E = e_all.size(2);
  const torch::Tensor w_ih = rnn->param("weight_ih_l0");  // [3H, E + C]: embedding columns, then context columns
  const torch::Tensor gi_x = train_linear(e_all, w_ih.narrow(1, 0, E), rnn->param("bias_ih_l0"));
  AdditiveGruRecurrence r = additive_gru_recurrence(gi_x, state.rnn.h[0], mem.keys, mem.values, mem.mask,
                                                    w_ih.narrow(1, E, w_ih.size(1) - E), rnn->param("weight_hh_l0"),
                                                    rnn->param("bias_hh_l0"), additive->query_weight(), additive->v_vector());
  DecoderOutput o;
  o.readout = readout_at(torch::cat({r.states, r.contexts, e_all}, -1), rows);
  o.weights = r.weights;
  return o;
}

DecoderOutput DecoderImpl::forward_stepped_recurrence(const torch::Tensor& tgt_in, DecoderState& state,
                                                      const AttentionMemory& mem, const torch::Tensor& rows) {
  // The context depends on s_{t-1}, so the recurrence is stepped; embeddings and readout stay batched.
  torch::Tensor e_all = embedded(tgt_in);  // [B, T, E]
  const int64_t T = tgt_in.size(1);
  // One unbind rather than T selects: each select's backward would fill a whole [B, T, E] gradient.
  const std::vector<torch::Tensor> e_steps = e_all.unbind(1);
  std::vector<torch::Tensor> ys, ctxs, weights;
  ys.reserve(static_cast<size_t>(T));
  ctxs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    AttentionOutput a = attention_->attend(state.rnn.h[layers_ - 1].unsqueeze(1), mem);  // queried with s_{t-1}
    torch::Tensor ctx = a.context.squeeze(1);
    if (a.weights.defined()) weights.push_back(a.weights.squeeze(1));
    ctxs.push_back(ctx);
    auto [y, st] = rnn->step(torch::cat({e_steps[static_cast<size_t>(t)], ctx}, -1), state.rnn);
    state.rnn = st;
    ys.push_back(y);
  }
  DecoderOutput o;
  o.readout = readout_at(torch::cat({torch::stack(ys, 1), torch::stack(ctxs, 1), e_all}, -1), rows);
  if (!weights.empty()) o.weights = torch::stack(weights, 1);
  return o;
}

DecoderOutput DecoderImpl::forward_self_attention(const torch::Tensor& tgt_in, const AttentionMemory& mem,
                                                  const torch::Tensor& rows) {
  // [B, T, H], every position at once. Padded target positions are no keys, nor is the <eos> that a batch's shorter
  // targets carry in tgt_in (it is cut from the longest only): without the causal mask it would show the length.
  SelfAttentionOutput sa = self_attention(embedded(tgt_in), mem, nullptr, tgt_in.ne(kPadId).logical_and(tgt_in.ne(kEosId)));
  DecoderOutput o;
  o.readout = at_rows(sa.states, rows);
  o.weights = sa.cross_weights;
  o.head_weights = sa.cross_head_weights;
  o.self_weights = std::move(sa.self_weights);
  return o;
}

DecoderOutput DecoderImpl::forward_token_by_token(const torch::Tensor& tgt_in, DecoderState& state, const AttentionMemory& mem,
                                                  double teacher_forcing, const torch::Tensor& rows) {
  const int64_t T = tgt_in.size(1);
  std::vector<torch::Tensor> readouts, weights, heads;
  readouts.reserve(static_cast<size_t>(T));
  torch::Tensor y_prev = tgt_in.select(1, 0);
  for (int64_t t = 0; t < T; ++t) {
    DecoderStepOutput s = step(y_prev, state, mem);
    readouts.push_back(s.readout);
    if (s.weights.defined()) weights.push_back(s.weights);
    if (s.head_weights.defined()) heads.push_back(s.head_weights);
    if (t + 1 < T) {
      y_prev = tgt_in.select(1, t + 1);
      if (teacher_forcing < 1.0) {
        // Feed the model's own prediction where a coin with P(gold) = teacher_forcing says so.
        torch::NoGradGuard ng;
        torch::Tensor pred = logits(s.readout).argmax(-1);
        torch::Tensor use_gold = torch::bernoulli(torch::full({y_prev.size(0)}, teacher_forcing)).to(torch::kBool).to(y_prev.device());
        y_prev = torch::where(use_gold, y_prev, pred);
      }
    }
  }
  DecoderOutput o;
  o.readout = at_rows(torch::stack(readouts, 1), rows);
  if (!weights.empty()) o.weights = torch::stack(weights, 1);
  if (!heads.empty()) o.head_weights = torch::stack(heads, 2);
  return o;
}

}  // namespace attnmt
