#include "model/rnn.h"

#include "common/precision.h"
#include "kernels/gru_recurrence.h"
#include "kernels/mode.h"

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
// One GRU layer and direction as a single autograd node (kernels/gru_recurrence.h): training on the CPU. A single step too
// (a decoder stepping for input feeding) where training's products are packed: ATen's GRU would hand the BLAS six
// small products per step, whose threads then spin against the packed kernel's helpers on the other core.
// Elsewhere (a GPU, --kernels reference) a sequence of more than one step runs as the device path's node, which
// dispatches a few operations a step (kernels/gru_recurrence_device.h); a single step stays ATen's GRU, one call.
bool use_gru_sequence(const torch::Tensor& x) {
  if (!kernels_on(x.device())) return x.size(1) > 1;
  return torch::GradMode::is_enabled() && (x.size(1) > 1 || (x.size(1) == 1 && packed_products()));
}

// Per-layer states [B, H] as one [L, B, H]: one layer's as a view, no copy (a decoder step in training comes here).
torch::Tensor layered(const std::vector<torch::Tensor>& v) { return v.size() == 1 ? v[0].unsqueeze(0) : torch::stack(v, 0); }

torch::Tensor gru_layer(const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& w_ih, const torch::Tensor& w_hh,
                        const torch::Tensor& b_ih, const torch::Tensor& b_hh) {
  return gru_sequence(train_linear(x, w_ih, b_ih), h0, w_hh, b_hh);
}
}  // namespace

std::pair<torch::Tensor, RnnState> RnnImpl::forward(const torch::Tensor& x, const RnnState& state) {
  if (gru && !bidirectional_ && use_gru_sequence(x)) {  // layer by layer, each one node; dropout between, as ATen's GRU
    const torch::OrderedDict<std::string, torch::Tensor> params = gru->named_parameters(/*recurse=*/false);
    std::vector<torch::Tensor> finals;  // [B, H] per layer
    torch::Tensor in = x;
    for (int64_t l = 0; l < layers_; ++l) {
      const std::string k = std::to_string(l);
      const torch::Tensor h0 = state.h.defined() ? state.h[l] : torch::zeros({x.size(0), hidden_}, x.options());
      in = gru_layer(in, h0, params["weight_ih_l" + k], params["weight_hh_l" + k], params["bias_ih_l" + k], params["bias_hh_l" + k]);
      finals.push_back(in.select(1, in.size(1) - 1));
      if (l + 1 < layers_) in = torch::dropout(in, inner_dropout_, is_training());
    }
    return {in, RnnState{layered(finals), torch::Tensor()}};
  }
  // LibTorch's recurrences in float32 with autocast off, as attnmt's one-node ones (common/precision.h): the state
  // keeps float32's precision, and oneDNN has no bfloat16 RNN on CPUs without AVX-512.
  const NoAutocast fp32(x.device());
  const torch::Tensor xf = float_if_reduced(x);
  if (lstm) {
    auto [y, hc] = state.h.defined()
                       ? lstm->forward(xf, std::make_tuple(float_if_reduced(state.h), float_if_reduced(state.c)))
                       : lstm->forward(xf);
    return {y, RnnState{std::get<0>(hc), std::get<1>(hc)}};
  }
  auto [y, h] = state.h.defined() ? gru->forward(xf, float_if_reduced(state.h)) : gru->forward(xf);
  return {y, RnnState{h, torch::Tensor()}};
}

std::pair<torch::Tensor, RnnState> RnnImpl::step(const torch::Tensor& x, const RnnState& state) {
  TORCH_CHECK(x.dim() == 2, "Rnn::step: x must be [B, In], got ", x.sizes());
  TORCH_CHECK(!bidirectional_, "Rnn::step: one direction only");
  if (!kernels_on(x.device()) && state.h.defined() && !(is_training() && layers_ > 1 && inner_dropout_ > 0))
    return cell_step(x, state);
  if (is_training() || torch::GradMode::is_enabled() || !kernels_on(x.device()) || !state.h.defined()) {
    auto [y, st] = forward(x.unsqueeze(1), state);
    return {y.squeeze(1), st};
  }
  if (packed_ih_.size() < static_cast<size_t>(layers_)) {
    packed_ih_.resize(static_cast<size_t>(layers_));
    packed_hh_.resize(static_cast<size_t>(layers_));
  }
  const int64_t H = hidden_;
  // One look-up of the weights per step (param() builds the module's name table on every call).
  const torch::OrderedDict<std::string, torch::Tensor> params =
      lstm ? lstm->named_parameters(/*recurse=*/false) : gru->named_parameters(/*recurse=*/false);
  RnnState next;
  std::vector<torch::Tensor> hs, cs;
  torch::Tensor in = x;
  for (int64_t l = 0; l < layers_; ++l) {
    const std::string k = std::to_string(l);
    const torch::Tensor gi = packed_ih_[static_cast<size_t>(l)](in, params["weight_ih_l" + k], params["bias_ih_l" + k]);
    const torch::Tensor h = state.h[l];
    const torch::Tensor gh = packed_hh_[static_cast<size_t>(l)](h, params["weight_hh_l" + k], params["bias_hh_l" + k]);
    if (lstm) {  // gates i, f, g, o
      const torch::Tensor g = gi + gh;
      const torch::Tensor sg = torch::sigmoid(g);  // the g gate's sigmoid is not used: one op instead of three
      const torch::Tensor c = sg.narrow(1, H, H) * state.c[l] + sg.narrow(1, 0, H) * torch::tanh(g.narrow(1, 2 * H, H));
      in = sg.narrow(1, 3 * H, H) * torch::tanh(c);
      cs.push_back(c);
    } else {
      in = gru_cell(gi, gh, h, H).h;
    }
    hs.push_back(in);
  }
  next.h = torch::stack(hs, 0);
  if (lstm) next.c = torch::stack(cs, 0);
  return {in, next};
}

std::pair<torch::Tensor, RnnState> RnnImpl::cell_step(const torch::Tensor& x, const RnnState& state) {
  const NoAutocast fp32(x.device());  // in float32, as forward()
  const torch::OrderedDict<std::string, torch::Tensor> params =
      lstm ? lstm->named_parameters(/*recurse=*/false) : gru->named_parameters(/*recurse=*/false);
  std::vector<torch::Tensor> hs, cs;
  torch::Tensor in = float_if_reduced(x);
  for (int64_t l = 0; l < layers_; ++l) {
    const std::string k = std::to_string(l);
    const torch::Tensor &w_ih = params["weight_ih_l" + k], &w_hh = params["weight_hh_l" + k];
    const torch::Tensor &b_ih = params["bias_ih_l" + k], &b_hh = params["bias_hh_l" + k];
    if (lstm) {
      auto [h, c] = at::lstm_cell(in, {float_if_reduced(state.h[l]), float_if_reduced(state.c[l])}, w_ih, w_hh, b_ih, b_hh);
      in = h;
      cs.push_back(c);
    } else {
      in = at::gru_cell(in, float_if_reduced(state.h[l]), w_ih, w_hh, b_ih, b_hh);
    }
    hs.push_back(in);
  }
  return {in, RnnState{layered(hs), lstm ? layered(cs) : torch::Tensor()}};
}

std::pair<torch::Tensor, RnnState> RnnImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& lengths) {
  namespace rnnu = torch::nn::utils::rnn;
  const NoAutocast fp32(x.device());  // as in forward
  auto packed = rnnu::pack_padded_sequence(float_if_reduced(x), lengths.to(torch::kCPU), /*batch_first=*/true, /*enforce_sorted=*/false);
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

torch::Tensor RnnImpl::packed_gru_layer(const torch::Tensor& x, size_t which, const std::vector<torch::Tensor>& w) {
  if (packed_ih_.size() <= which) {
    packed_ih_.resize(which + 1);
    packed_hh_.resize(which + 1);
  }
  const torch::Tensor gi = packed_ih_[which](x, w[0], w[2]);  // [B, S, 3H]: all steps in one product
  torch::Tensor h = torch::zeros({x.size(0), hidden_}, x.options());
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < x.size(1); ++t) {
    h = gru_cell(gi.select(1, t), packed_hh_[which](h, w[1], w[3]), h, hidden_).h;
    ys.push_back(h);
  }
  return torch::stack(ys, 1);
}

std::pair<torch::Tensor, RnnState> RnnImpl::forward_lengths(const torch::Tensor& x, const torch::Tensor& lengths) {
  if (lstm) return forward_packed(x, lengths);
  TORCH_CHECK(x.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == x.size(0), "Rnn::forward_lengths: x [B, S, In] and lengths [B] expected, got ",
              x.sizes(), " and ", lengths.sizes());
  const int64_t B = x.size(0), S = x.size(1);
  const torch::Tensor len = lengths.to(x.device(), torch::kLong).unsqueeze(1);   // [B, 1] (a copy to the device, no wait)
  const torch::Tensor pos = torch::arange(S, len.options()).unsqueeze(0);         // [1, S]
  const torch::Tensor valid = pos < len;                                          // [B, S]
  const torch::Tensor rev = torch::where(valid, len - 1 - pos, pos).unsqueeze(2);  // reverses each sentence (an involution)
  const torch::Tensor last = (len - 1).unsqueeze(2);                              // [B, 1, 1]
  auto reverse = [&](const torch::Tensor& t) { return t.gather(1, rev.expand({B, S, t.size(2)})); };
  auto at_last = [&](const torch::Tensor& t) { return t.gather(1, last.expand({B, 1, t.size(2)})).squeeze(1); };
  const auto params = gru->named_parameters(/*recurse=*/false);
  const torch::Tensor h0 = torch::zeros({1, B, hidden_}, x.options());
  const int64_t dirs = bidirectional_ ? 2 : 1;
  auto weight = [&](const char* name, int64_t l, int64_t d) {
    return params[std::string(name) + "_l" + std::to_string(l) + (d ? "_reverse" : "")];
  };
  if (!kernels_on(x.device())) {
    // A GPU's path (and --kernels reference): per layer, the input gates of both directions in one batched product
    // and both directions' recurrences in one loop (kernels/gru_recurrence.h: gru_sequences).
    std::vector<torch::Tensor> finals;  // [B, H] per layer and direction, in h_n's order
    torch::Tensor in = x;
    for (int64_t l = 0; l < layers_; ++l) {
      std::vector<torch::Tensor> x_dirs, w_ih, b_ih, w_hh, b_hh;
      for (int64_t d = 0; d < dirs; ++d) {
        x_dirs.push_back((d ? reverse(in) : in).reshape({B * S, in.size(2)}));
        w_ih.push_back(weight("weight_ih", l, d).t());
        b_ih.push_back(weight("bias_ih", l, d));
        w_hh.push_back(weight("weight_hh", l, d));
        b_hh.push_back(weight("bias_hh", l, d));
      }
      const torch::Tensor gi = torch::baddbmm(torch::stack(b_ih).unsqueeze(1), torch::stack(x_dirs), torch::stack(w_ih));  // [D, B*S, 3H]
      const torch::Tensor y = gru_sequences(gi.view({dirs, B, S, 3 * hidden_}), h0.expand({dirs, B, hidden_}), torch::stack(w_hh),
                                            torch::stack(b_hh));  // [D, B, S, H]
      std::vector<torch::Tensor> outs;
      for (int64_t d = 0; d < dirs; ++d) {
        finals.push_back(at_last(y[d]));
        outs.push_back(d ? reverse(y[d]) : y[d]);
      }
      in = outs.size() == 2 ? torch::cat(outs, 2) : outs[0];
      if (l + 1 < layers_) in = torch::dropout(in, inner_dropout_, is_training());
    }
    return {in * valid.unsqueeze(2).to(in.scalar_type()), RnnState{torch::stack(finals, 0), torch::Tensor()}};
  }
  // While decoding, each direction's products go through packed weights (no threaded BLAS product in a search).
  const bool decoding = !is_training() && !torch::GradMode::is_enabled() && PackedLinear::available();
  std::vector<torch::Tensor> finals;  // [B, H] per layer and direction, in h_n's order
  torch::Tensor in = x;
  for (int64_t l = 0; l < layers_; ++l) {
    std::vector<torch::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const std::vector<torch::Tensor> w = {params["weight_ih" + sfx], params["weight_hh" + sfx], params["bias_ih" + sfx],
                                            params["bias_hh" + sfx]};
      const torch::Tensor x_dir = d ? reverse(in) : in;
      torch::Tensor y;
      if (use_gru_sequence(x_dir)) y = gru_layer(x_dir, h0[0], w[0], w[1], w[2], w[3]);
      else if (decoding) y = packed_gru_layer(x_dir, static_cast<size_t>(l * dirs + d), w);
      else y = std::get<0>(at::gru(x_dir, h0, w, /*has_biases=*/true, /*num_layers=*/1, 0.0, is_training(),
                                   /*bidirectional=*/false, /*batch_first=*/true));
      finals.push_back(at_last(y));
      outs.push_back(d ? reverse(y) : y);
    }
    in = outs.size() == 2 ? torch::cat(outs, 2) : outs[0];
    if (l + 1 < layers_) in = torch::dropout(in, inner_dropout_, is_training());
  }
  return {in * valid.unsqueeze(2).to(in.scalar_type()), RnnState{torch::stack(finals, 0), torch::Tensor()}};
}

}  // namespace attnmt
