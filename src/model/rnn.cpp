#include "model/rnn.h"

#include "data/special_tokens.h"
#include "model/recurrence.h"

namespace attnmt {

RnnState RnnState::index_select(const torch::Tensor& rows) const {
  RnnState s;
  s.h = h.index_select(1, rows);
  if (c.defined()) s.c = c.index_select(1, rows);
  return s;
}

RnnImpl::RnnImpl(RnnCell cell, int64_t input, int64_t hidden, int64_t layers, double dropout,
                 bool bidirectional)
    : hidden_(hidden), layers_(layers), inner_dropout_(layers > 1 ? dropout : 0.0), bidirectional_(bidirectional) {
  if (cell == RnnCell::kLstm) {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(input, hidden)
                                                       .num_layers(layers)
                                                       .batch_first(true)
                                                       .dropout(inner_dropout_)
                                                       .bidirectional(bidirectional)));
  } else {
    gru = register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(input, hidden)
                                                    .num_layers(layers)
                                                    .batch_first(true)
                                                    .dropout(inner_dropout_)
                                                    .bidirectional(bidirectional)));
  }
}

namespace {
// One GRU layer and direction as a single autograd node (model/recurrence.h): training on the CPU.
bool use_gru_sequence(const torch::Tensor& x) { return x.is_cpu() && torch::GradMode::is_enabled() && x.size(1) > 1; }

torch::Tensor gru_layer(const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& w_ih, const torch::Tensor& w_hh,
                        const torch::Tensor& b_ih, const torch::Tensor& b_hh) {
  return gru_sequence(torch::nn::functional::linear(x, w_ih, b_ih), h0, w_hh, b_hh);
}
}  // namespace

std::pair<torch::Tensor, RnnState> RnnImpl::forward(const torch::Tensor& x, const RnnState& state) {
  if (gru && layers_ == 1 && !bidirectional_ && use_gru_sequence(x)) {
    const torch::Tensor h0 = state.h.defined() ? state.h[0] : torch::zeros({x.size(0), hidden_}, x.options());
    torch::Tensor y = gru_layer(x, h0, param("weight_ih_l0"), param("weight_hh_l0"), param("bias_ih_l0"), param("bias_hh_l0"));
    return {y, RnnState{y.select(1, y.size(1) - 1).unsqueeze(0), torch::Tensor()}};
  }
  if (lstm) {
    auto [y, hc] = state.h.defined() ? lstm->forward(x, std::make_tuple(state.h, state.c)) : lstm->forward(x);
    return {y, RnnState{std::get<0>(hc), std::get<1>(hc)}};
  }
  auto [y, h] = state.h.defined() ? gru->forward(x, state.h) : gru->forward(x);
  return {y, RnnState{h, torch::Tensor()}};
}

std::pair<torch::Tensor, RnnState> RnnImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& lengths) {
  namespace rnnu = torch::nn::utils::rnn;
  auto packed = rnnu::pack_padded_sequence(x, lengths.to(torch::kCPU), /*batch_first=*/true, /*enforce_sorted=*/false);
  const int64_t total = x.size(1);
  if (lstm) {
    auto [y, hc] = lstm->forward_with_packed_input(packed);
    auto [out, len] = rnnu::pad_packed_sequence(y, true, 0.0, total);
    return {out, RnnState{std::get<0>(hc), std::get<1>(hc)}};
  }
  auto [y, h] = gru->forward_with_packed_input(packed);
  auto [out, len] = rnnu::pad_packed_sequence(y, true, 0.0, total);
  return {out, RnnState{h, torch::Tensor()}};
}

torch::Tensor RnnImpl::param(const std::string& name) const {
  // named_parameters() returns its dictionary by value: keep it alive while reading from it (a pointer from
  // find() on the temporary dangled once the statement ended).
  const torch::OrderedDict<std::string, torch::Tensor> params =
      lstm ? lstm->named_parameters(/*recurse=*/false) : gru->named_parameters(/*recurse=*/false);
  const torch::Tensor* p = params.find(name);
  TORCH_CHECK(p, "Rnn: no parameter ", name);
  return *p;
}

std::pair<torch::Tensor, RnnState> RnnImpl::forward_lengths(const torch::Tensor& x, const torch::Tensor& lengths) {
  if (lstm || !x.device().is_cpu()) return forward_packed(x, lengths);
  TORCH_CHECK(x.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == x.size(0), "Rnn::forward_lengths: x [B, S, In] and lengths [B] expected, got ",
              x.sizes(), " and ", lengths.sizes());
  const int64_t B = x.size(0), S = x.size(1);
  const torch::Tensor len = lengths.to(torch::kLong).unsqueeze(1);               // [B, 1]
  const torch::Tensor pos = torch::arange(S, len.options()).unsqueeze(0);         // [1, S]
  const torch::Tensor valid = pos < len;                                          // [B, S]
  const torch::Tensor rev = torch::where(valid, len - 1 - pos, pos).unsqueeze(2);  // reverses each sentence (an involution)
  const torch::Tensor last = (len - 1).unsqueeze(2);                              // [B, 1, 1]
  auto reverse = [&](const torch::Tensor& t) { return t.gather(1, rev.expand({B, S, t.size(2)})); };
  auto at_last = [&](const torch::Tensor& t) { return t.gather(1, last.expand({B, 1, t.size(2)})).squeeze(1); };
  const auto params = gru->named_parameters(/*recurse=*/false);
  const torch::Tensor h0 = torch::zeros({1, B, hidden_}, x.options());
  std::vector<torch::Tensor> finals;  // [B, H] per layer and direction, in h_n's order
  torch::Tensor in = x;
  for (int64_t l = 0; l < layers_; ++l) {
    std::vector<torch::Tensor> outs;
    for (int d = 0; d < (bidirectional_ ? 2 : 1); ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const std::vector<torch::Tensor> w = {params["weight_ih" + sfx], params["weight_hh" + sfx], params["bias_ih" + sfx],
                                            params["bias_hh" + sfx]};
      const torch::Tensor x_dir = d ? reverse(in) : in;
      torch::Tensor y = use_gru_sequence(x_dir) ? gru_layer(x_dir, h0[0], w[0], w[1], w[2], w[3])
                                                : std::get<0>(at::gru(x_dir, h0, w, /*has_biases=*/true, /*num_layers=*/1, 0.0,
                                                                      is_training(), /*bidirectional=*/false, /*batch_first=*/true));
      finals.push_back(at_last(y));
      outs.push_back(d ? reverse(y) : y);
    }
    in = outs.size() == 2 ? torch::cat(outs, 2) : outs[0];
    if (l + 1 < layers_) in = torch::dropout(in, inner_dropout_, is_training());
  }
  return {in * valid.unsqueeze(2).to(in.scalar_type()), RnnState{torch::stack(finals, 0), torch::Tensor()}};
}

EncoderImpl::EncoderImpl(const ModelConfig& cfg, int64_t vocab)
    : bidirectional_(cfg.bidirectional), layers_(cfg.encoder_layers) {
  embed = register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, cfg.embed_dim).padding_idx(kPadId)));
  drop = register_module("drop", torch::nn::Dropout(cfg.dropout));
  int64_t per_dir = cfg.bidirectional ? cfg.hidden_dim / 2 : cfg.hidden_dim;
  rnn = register_module("rnn", Rnn(cfg.rnn, cfg.embed_dim, per_dir, cfg.encoder_layers, cfg.dropout, cfg.bidirectional));
}

EncoderOutput EncoderImpl::forward(const torch::Tensor& src, const torch::Tensor& lengths, const torch::Tensor& mask) {
  TORCH_CHECK(src.dim() == 2, "Encoder: src must be [B, S], got ", src.sizes());
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == src.size(0), "Encoder: lengths must be [B], got ", lengths.sizes());
  TORCH_CHECK(mask.sizes() == src.sizes(), "Encoder: mask must match src, got ", mask.sizes());
  TORCH_CHECK(lengths.min().item<int64_t>() >= 1, "Encoder: every source sentence needs at least one token");
  torch::Tensor x = drop(embed(src));                     // [B, S, E]
  auto [states, st] = rnn->forward_lengths(x, lengths);   // [B, S, H], h [L*dirs, B, H/dirs]
  auto last = [&](const torch::Tensor& t) {
    if (!t.defined()) return torch::Tensor();
    if (bidirectional_) return torch::cat({t[2 * layers_ - 2], t[2 * layers_ - 1]}, -1);  // [B, H]
    return t[layers_ - 1];
  };
  return {states, mask, last(st.h), last(st.c)};
}

DecoderState DecoderState::index_select(const torch::Tensor& rows) const {
  DecoderState s;
  s.rnn = rnn.index_select(rows);
  if (feed.defined()) s.feed = feed.index_select(0, rows);
  if (fixed.defined()) s.fixed = fixed.index_select(0, rows);
  return s;
}

DecoderDims decoder_dims(const ModelConfig& cfg) {
  DecoderDims d;
  const int64_t H = cfg.hidden_dim, E = cfg.embed_dim;
  d.luong_style = cfg.attention.type == AttentionType::kLuong || cfg.attention.type == AttentionType::kScaledDot;
  d.rnn_input = E + ((!d.luong_style || cfg.input_feeding) ? H : 0);
  d.readout_input = d.luong_style ? 2 * H : 2 * H + E;
  return d;
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg, int64_t vocab)
    : luong_style_(decoder_dims(cfg).luong_style),
      input_feeding_(cfg.input_feeding),
      hidden_(cfg.hidden_dim),
      layers_(cfg.decoder_layers) {
  const int64_t H = cfg.hidden_dim, E = cfg.embed_dim;
  embed = register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, E).padding_idx(kPadId)));
  drop = register_module("drop", torch::nn::Dropout(cfg.dropout));
  attention_ = make_attention(cfg);
  if (attention_) register_module("attention", attention_);
  const DecoderDims dims = decoder_dims(cfg);
  rnn = register_module("rnn", Rnn(cfg.rnn, dims.rnn_input, H, cfg.decoder_layers, cfg.dropout, false));
  bridge_h = register_module("bridge_h", torch::nn::Linear(H, H * layers_));
  if (cfg.rnn == RnnCell::kLstm) bridge_c = register_module("bridge_c", torch::nn::Linear(H, H * layers_));
  combine = register_module("combine", torch::nn::Linear(dims.readout_input, H));
  out = register_module("out", torch::nn::Linear(H, vocab));
}

DecoderState DecoderImpl::init_state(const EncoderOutput& enc) {
  const int64_t B = enc.final_h.size(0);
  auto bridge = [&](torch::nn::Linear& l, const torch::Tensor& x) {
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
  if (!attention_) return {torch::Tensor(), torch::Tensor(), enc.mask};
  return attention_->prepare(enc.states, enc.mask);
}

DecoderStepOutput DecoderImpl::step(const torch::Tensor& y_prev, DecoderState& state, const AttentionMemory& mem) {
  TORCH_CHECK(y_prev.dim() == 1, "Decoder::step: y_prev must be [B], got ", y_prev.sizes());
  torch::Tensor e = drop(embed(y_prev));  // [B, E]
  const torch::Tensor top_prev = state.rnn.h[layers_ - 1];  // [B, H]
  DecoderStepOutput o;
  if (luong_style_) {
    torch::Tensor x = input_feeding_ ? torch::cat({e, state.feed}, -1) : e;
    auto [y, st] = rnn->forward(x.unsqueeze(1), state.rnn);  // y [B, 1, H]
    state.rnn = st;
    AttentionOutput a = attention_->attend(y, mem);          // queried with the current state
    torch::Tensor ht = torch::tanh(combine(torch::cat({a.context, y}, -1))).squeeze(1);  // h~_t [B, H]
    if (input_feeding_) state.feed = ht;
    o.readout = ht;
    o.weights = a.weights.squeeze(1);
    if (a.head_weights.defined()) o.head_weights = a.head_weights.squeeze(2);
    return o;
  }
  torch::Tensor ctx;
  if (attention_) {
    AttentionOutput a = attention_->attend(top_prev.unsqueeze(1), mem);  // queried with s_{t-1}
    ctx = a.context.squeeze(1);
    o.weights = a.weights.squeeze(1);
  } else {
    ctx = state.fixed;
  }
  auto [y, st] = rnn->forward(torch::cat({e, ctx}, -1).unsqueeze(1), state.rnn);
  state.rnn = st;
  o.readout = torch::tanh(combine(torch::cat({y.squeeze(1), ctx, e}, -1)));
  return o;
}

DecoderOutput DecoderImpl::forward(const torch::Tensor& tgt_in, DecoderState state, const AttentionMemory& mem,
                                   double teacher_forcing, bool stepwise, const torch::Tensor& rows) {
  TORCH_CHECK(tgt_in.dim() == 2, "Decoder: tgt_in must be [B, T], got ", tgt_in.sizes());
  TORCH_CHECK(state.rnn.h.size(1) == tgt_in.size(0), "Decoder: state batch ", state.rnn.h.size(1), " vs target ",
              tgt_in.size(0));
  TORCH_CHECK(!rows.defined() || (rows.dim() == 1 && rows.scalar_type() == torch::kLong),
              "Decoder: rows must be int64 [N], got ", rows.sizes());
  DecoderOutput o;
  const int64_t T = tgt_in.size(1);
  // The positions asked for, [B, T, F] -> [N, F] (all of them, unchanged, without rows).
  auto at_rows = [&](const torch::Tensor& x) { return rows.defined() ? x.reshape({-1, x.size(2)}).index_select(0, rows) : x; };
  // The readout tanh(W_c [features]) at those positions only: padding costs no readout product.
  auto readout = [&](const torch::Tensor& features) { return torch::tanh(combine(at_rows(features))); };
  if (can_run_all_steps() && !stepwise && teacher_forcing >= 1.0) {
    // Whole-sequence path: one RNN call over all steps, then attention in batched matmuls.
    torch::Tensor e = drop(embed(tgt_in));              // [B, T, E]
    auto [y, st] = rnn->forward(e, state.rnn);          // [B, T, H]
    AttentionOutput a = attention_->attend(y, mem);     // [B, T, H], [B, T, S]
    o.readout = readout(torch::cat({a.context, y}, -1));
    o.weights = a.weights;
    o.head_weights = a.head_weights;
    return o;
  }
  if (!luong_style_ && !stepwise && teacher_forcing >= 1.0) {
    // Bahdanau / none: what does not feed back is batched over all steps: embeddings (one lookup and dropout)
    // and the readout tanh(W[s_t; c_t; e_t]) (one matmul instead of T small ones).
    torch::Tensor e_all = drop(embed(tgt_in));  // [B, T, E]
    if (!attention_) {
      // The fixed context is the same at every step: one RNN call over [e_t; c] for all steps.
      torch::Tensor C = state.fixed.unsqueeze(1).expand({-1, T, -1});
      auto [Y, st] = rnn->forward(torch::cat({e_all, C}, -1), state.rnn);
      o.readout = readout(torch::cat({Y, C, e_all}, -1));
      return o;
    }
    auto* additive = dynamic_cast<AdditiveAttention*>(attention_.get());
    if (additive && !rnn->is_lstm() && layers_ == 1 && e_all.is_cpu()) {
      // One GRU layer with additive attention on the CPU: the stepped recurrence as one autograd node
      // (model/recurrence.h). Other devices keep the per-step path below.
      const int64_t E = e_all.size(2);
      const torch::Tensor w_ih = rnn->param("weight_ih_l0");  // [3H, E + C]: embedding columns, then context columns
      const torch::Tensor gi_x = torch::nn::functional::linear(e_all, w_ih.narrow(1, 0, E), rnn->param("bias_ih_l0"));
      AdditiveGruRecurrence r = additive_gru_recurrence(gi_x, state.rnn.h[0], mem.keys, mem.values, mem.mask,
                                                        w_ih.narrow(1, E, w_ih.size(1) - E), rnn->param("weight_hh_l0"),
                                                        rnn->param("bias_hh_l0"), additive->query_weight(), additive->v_vector());
      o.readout = readout(torch::cat({r.states, r.contexts, e_all}, -1));
      o.weights = r.weights;
      return o;
    }
    // Otherwise the recurrence is stepped (the context depends on s_{t-1}).
    // One unbind rather than T selects: each select's backward would fill a whole [B, T, E] gradient.
    const std::vector<torch::Tensor> e_steps = e_all.unbind(1);
    std::vector<torch::Tensor> ys, ctxs, weights;
    ys.reserve(static_cast<size_t>(T));
    ctxs.reserve(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      AttentionOutput a = attention_->attend(state.rnn.h[layers_ - 1].unsqueeze(1), mem);  // queried with s_{t-1}
      torch::Tensor ctx = a.context.squeeze(1);
      weights.push_back(a.weights.squeeze(1));
      ctxs.push_back(ctx);
      auto [y, st] = rnn->forward(torch::cat({e_steps[static_cast<size_t>(t)], ctx}, -1).unsqueeze(1), state.rnn);
      state.rnn = st;
      ys.push_back(y.squeeze(1));
    }
    o.readout = readout(torch::cat({torch::stack(ys, 1), torch::stack(ctxs, 1), e_all}, -1));
    o.weights = torch::stack(weights, 1);
    return o;
  }
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
  o.readout = at_rows(torch::stack(readouts, 1));
  if (!weights.empty()) o.weights = torch::stack(weights, 1);
  if (!heads.empty()) o.head_weights = torch::stack(heads, 2);
  return o;
}

}  // namespace attnmt
