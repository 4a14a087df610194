// The recurrences of gru_recurrence.h for the tensors the CPU kernels do not take: a GPU's, and every tensor under
// --kernels reference. LibTorch operations only, arranged so that a step dispatches as few of them as it can, since
// on a GPU each is a kernel launch and a step's work is small:
// - everything that does not depend on the previous step is done once, for all steps, outside the loop (the input
//   gates, the masks as an additive bias, the products of the weight gradients);
// - a step writes its results into preallocated buffers (the *_out forms), so that nothing is stacked afterwards;
// - the backward's gate derivatives are products of saved values that do not depend on the incoming gradient: they
//   are formed for all steps at once before the loop, and each step is then one product per gate block;
// - the state's own product and the attention query share one product (W_hh and W_q stacked).
// The gradients are those of the composed operations (tests/test_kernels.cpp: Kernels.DeviceRecurrence*).
#include "kernels/gru_recurrence_device.h"

#include "common/precision.h"

#include <limits>

namespace attnmt {

namespace {
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The out= forms take their output as a non-const reference: a view made in the call is passed through this.
Tensor& into(Tensor&& view) { return view; }

// One GRU cell from its gate inputs gi, gh [..., 3H] (r, z, n), writing sigmoid(r), sigmoid(z), tanh(n) into g
// [..., 3H] and the new state into h_out: h' = n + z (h - n). Five operations.
void gru_cell_into(const Tensor& gi, const Tensor& gh, const Tensor& h, Tensor g, Tensor h_out, int64_t H) {
  const int64_t last = gi.dim() - 1;
  Tensor rz = g.narrow(last, 0, 2 * H), n = g.narrow(last, 2 * H, H);
  at::add_out(rz, gi.narrow(last, 0, 2 * H), gh.narrow(last, 0, 2 * H)).sigmoid_();
  at::addcmul_out(n, gi.narrow(last, 2 * H, H), g.narrow(last, 0, H), gh.narrow(last, 2 * H, H)).tanh_();
  at::lerp_out(h_out, n, h, g.narrow(last, H, H));
}

// The derivatives of h' with respect to the gate inputs, for every step at once: with a the input of n's tanh,
// dh'/da = (1 - z)(1 - n^2), dh'/d(z input) = (h - n) z (1 - z), dh'/d(r input) = dh'/da gh_n r (1 - r). gi's
// gradient is dh' times [c_r, c_z, c_a] and gh's dh' times [c_r, c_z, c_a r] ([..., 3, H] each): one product a step.
struct GateCoefficients {
  Tensor gi, gh;
};
GateCoefficients gate_coefficients(const Tensor& g, const Tensor& gh_n, const Tensor& h_prev, int64_t H) {
  const int64_t last = g.dim() - 1;
  const Tensor r = g.narrow(last, 0, H), z = g.narrow(last, H, H), n = g.narrow(last, 2 * H, H);
  std::vector<int64_t> shape = r.sizes().vec();
  shape.insert(shape.end() - 1, 3);
  GateCoefficients c;
  c.gi = torch::empty(shape, g.options());  // [..., 3, H]
  Tensor c_r = c.gi.select(last, 0), c_z = c.gi.select(last, 1), c_a = c.gi.select(last, 2);
  const Tensor one_minus_z = at::rsub(z, 1);
  at::mul_out(c_a, one_minus_z, at::rsub(n * n, 1));
  at::mul_out(c_z, (h_prev - n) * z, one_minus_z);
  at::mul_out(c_r, r * at::rsub(r, 1) * gh_n, c_a);
  c.gh = c.gi.clone();
  c.gh.select(last, 2).mul_(r);
  return c;
}

// D one-layer GRUs side by side (the directions of a bidirectional layer), all buffers [D, T, B, ...].
struct GruSequencesDevice : public torch::autograd::Function<GruSequencesDevice> {
  static Tensor forward(AutogradContext* ctx, const Tensor& gi_x, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
    const int64_t D = gi_x.size(0), B = gi_x.size(1), T = gi_x.size(2), H = h0.size(2);
    const Tensor gi = gi_x.transpose(1, 2);  // [D, T, B, 3H]
    const Tensor w_hh_t = w_hh.transpose(1, 2);  // [D, H, 3H]
    Tensor hs = torch::empty({D, T + 1, B, H}, h0.options());
    Tensor gates = torch::empty({D, T, B, 3 * H}, h0.options()), gh = torch::empty({D, T, B, 3 * H}, h0.options());
    hs.select(1, 0).copy_(h0);
    // Each step's product adds W_hh h to what its gates need beside it: r and z take gi + gh, n takes gh_n alone (r
    // scales it), so the addend of all steps, [gi_rz + b_hh_rz, b_hh_n], is made once: gh_t = [r, z inputs, gh_n].
    const Tensor addend = torch::cat({gi.narrow(3, 0, 2 * H) + b_hh.narrow(1, 0, 2 * H).unsqueeze(1).unsqueeze(1),
                                      b_hh.narrow(1, 2 * H, H).unsqueeze(1).unsqueeze(1).expand({D, T, B, H})},
                                     3);  // [D, T, B, 3H]
    for (int64_t t = 0; t < T; ++t) {
      Tensor gh_t = gh.select(1, t), g = gates.select(1, t);
      at::baddbmm_out(gh_t, addend.select(1, t), hs.select(1, t), w_hh_t);  // every direction in one product
      at::sigmoid_out(into(g.narrow(2, 0, 2 * H)), gh_t.narrow(2, 0, 2 * H));
      at::addcmul_out(into(g.narrow(2, 2 * H, H)), gi.select(1, t).narrow(2, 2 * H, H), g.narrow(2, 0, H), gh_t.narrow(2, 2 * H, H)).tanh_();
      at::lerp_out(into(hs.select(1, t + 1)), g.narrow(2, 2 * H, H), hs.select(1, t), g.narrow(2, H, H));
    }
    ctx->save_for_backward({hs, gates, gh, w_hh});
    return hs.narrow(1, 1, T).transpose(1, 2);  // [D, B, T, H]
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &hs = s[0], &gates = s[1], &gh = s[2], &w_hh = s[3];
    const int64_t D = gates.size(0), T = gates.size(1), B = gates.size(2), H = hs.size(3);
    const Tensor dy = grads[0].defined() ? grads[0].transpose(1, 2) : torch::zeros({D, T, B, H}, hs.options());  // [D, T, B, H]
    const Tensor h_prev = hs.narrow(1, 0, T);
    const GateCoefficients c = gate_coefficients(gates, gh.narrow(3, 2 * H, H), h_prev, H);  // [D, T, B, 3, H]
    Tensor d_gi = torch::empty({D, T, B, 3 * H}, hs.options()), d_gh = torch::empty({D, T, B, 3 * H}, hs.options());
    const Tensor z = gates.narrow(3, H, H);
    Tensor dh = dy.select(1, T - 1);
    for (int64_t t = T - 1; t >= 0; --t) {
      const Tensor dh_3 = dh.unsqueeze(2);  // [D, B, 1, H]
      Tensor dgh = d_gh.select(1, t);
      at::mul_out(into(d_gi.select(1, t).view({D, B, 3, H})), dh_3, c.gi.select(1, t));
      at::mul_out(into(dgh.view({D, B, 3, H})), dh_3, c.gh.select(1, t));
      // to h_{t-1}: the output's own gradient, directly through z, and through W_hh
      dh = t > 0 ? at::addcmul(dy.select(1, t - 1), dh, z.select(1, t)) : dh * z.select(1, 0);
      dh.baddbmm_(dgh, w_hh);
    }
    const Tensor d_w_hh = at::bmm(d_gh.view({D, T * B, 3 * H}).transpose(1, 2), h_prev.reshape({D, T * B, H}));
    return {d_gi.transpose(1, 2), dh, d_w_hh, d_gh.sum(torch::IntArrayRef{1, 2})};
  }
};

// The Bahdanau decoder recurrence, buffers [T, B, ...].
struct AdditiveGruDevice : public torch::autograd::Function<AdditiveGruDevice> {
  static tensor_list forward(AutogradContext* ctx, const Tensor& gi_x, const Tensor& h0, const Tensor& keys, const Tensor& values,
                             const Tensor& mask, const Tensor& w_ctx, const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_q,
                             const Tensor& v, bool keep) {
    const int64_t B = gi_x.size(0), T = gi_x.size(1), H = h0.size(1), S = keys.size(1), A = keys.size(2), C = values.size(2);
    const Tensor w_hq = torch::cat({w_hh, w_q}, 0);                 // [3H + A, H]: the state's gates and the query
    const Tensor b_hq = torch::constant_pad_nd(b_hh, {0, A});       // the query has no bias
    const Tensor w_hq_t = w_hq.t(), w_ctx_t = w_ctx.t(), b_hq_rows = b_hq.expand({B, 3 * H + A});
    // The padding mask as an additive bias: exp(-inf) = 0, the same weights as masking the scores.
    const Tensor bias = torch::full({B * S}, -std::numeric_limits<double>::infinity(), keys.options())
                            .masked_fill_(mask.reshape({B * S}), 0.0);
    const Tensor gi = gi_x.transpose(0, 1);  // [T, B, 3H]
    Tensor hs = torch::empty({T + 1, B, H}, h0.options()), hq = torch::empty({T, B, 3 * H + A}, h0.options());
    Tensor gates = torch::empty({T, B, 3 * H}, h0.options()), alpha = torch::empty({T, B, S}, h0.options());
    Tensor contexts = torch::empty({T, B, C}, h0.options());
    // tanh(W_q s + U h_j) for every step when a gradient will be asked for, else one step's
    Tensor e = torch::empty({keep ? T : 1, B, S, A}, h0.options());
    hs.select(0, 0).copy_(h0);
    for (int64_t t = 0; t < T; ++t) {
      const Tensor h = hs.select(0, t);
      Tensor hq_t = hq.select(0, t), e_t = e.select(0, keep ? t : 0), a_t = alpha.select(0, t);
      at::addmm_out(hq_t, b_hq_rows, h, w_hq_t);                                    // [W_hh s + b_hh, W_q s]
      at::add_out(e_t, keys, hq_t.narrow(1, 3 * H, A).unsqueeze(1)).tanh_();  // tanh(W_q s + U h_j)  [B, S, A]
      at::_softmax_out(a_t, at::addmv(bias, e_t.view({B * S, A}), v).view({B, S}), 1, false);  // v . e, masked, softmax
      at::bmm_out(into(contexts.select(0, t).unsqueeze(1)), a_t.unsqueeze(1), values);  // c_t = sum_j a_tj h_j
      gru_cell_into(at::addmm(gi.select(0, t), contexts.select(0, t), w_ctx_t), hq_t, h, gates.select(0, t), hs.select(0, t + 1), H);
    }
    const Tensor weights = alpha.transpose(0, 1);  // [B, T, S]
    ctx->mark_non_differentiable({weights});
    if (keep) ctx->save_for_backward({hs, hq, gates, alpha, contexts, e, values, w_ctx, w_hq, v});
    return {hs.narrow(0, 1, T).transpose(0, 1), contexts.transpose(0, 1), weights};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &hs = s[0], &hq = s[1], &gates = s[2], &alpha = s[3], &contexts = s[4], &e = s[5], &values = s[6], &w_ctx = s[7],
                 &w_hq = s[8], &v = s[9];
    const int64_t T = gates.size(0), B = gates.size(1), H = hs.size(2), S = alpha.size(2), A = e.size(3), C = values.size(2);
    const auto opts = hs.options();
    const Tensor dy = grads[0].defined() ? grads[0].transpose(0, 1) : torch::zeros({T, B, H}, opts);
    const Tensor dc_out = grads[1].defined() ? grads[1].transpose(0, 1) : torch::zeros({T, B, C}, opts);
    const Tensor h_prev = hs.narrow(0, 0, T);
    const GateCoefficients c = gate_coefficients(gates, hq.narrow(2, 2 * H, H), h_prev, H);  // [T, B, 3, H]
    // d score / d (W_q s + U h_j) = v (1 - e^2)  [T, B, S, A]; step t's slice becomes that step's gradient of the
    // pre-activation in place, and the keys' gradient is their sum over the steps after the loop.
    Tensor d_pre = at::rsub(e * e, 1).mul_(v);
    Tensor d_hq = torch::empty({T, B, 3 * H + A}, opts), d_gi = torch::empty({T, B, 3 * H}, opts);
    Tensor d_ctx = torch::empty({T, B, C}, opts), d_scores = torch::empty({T, B, S}, opts);
    const Tensor z = gates.narrow(2, H, H);
    Tensor dh = dy.select(0, T - 1);
    for (int64_t t = T - 1; t >= 0; --t) {
      const Tensor dh_3 = dh.unsqueeze(1);  // [B, 1, H]
      Tensor dgi = d_gi.select(0, t), dhq = d_hq.select(0, t), dc = d_ctx.select(0, t), ds = d_scores.select(0, t);
      at::mul_out(into(dgi.view({B, 3, H})), dh_3, c.gi.select(0, t));
      at::mul_out(into(dhq.narrow(1, 0, 3 * H).view({B, 3, H})), dh_3, c.gh.select(0, t));
      at::addmm_out(dc, dc_out.select(0, t), dgi, w_ctx);  // c_t enters the gates and the readout
      const Tensor da = at::bmm(values, dc.unsqueeze(2)).squeeze(2);  // [B, S]
      at::_softmax_backward_data_out(ds, da, alpha.select(0, t), 1, da.scalar_type());  // 0 where masked
      Tensor d_pre_t = d_pre.select(0, t).mul_(ds.unsqueeze(2));  // [B, S, A]
      at::sum_out(into(dhq.narrow(1, 3 * H, A)), d_pre_t, {1});  // the query's gradient
      // to s_{t-1}: the output's own gradient, directly through z, through W_hh and through the query W_q
      dh = t > 0 ? at::addcmul(dy.select(0, t - 1), dh, z.select(0, t)) : dh * z.select(0, 0);
      dh.addmm_(dhq, w_hq);
    }
    // Weight gradients: one product over all T x B rows each.
    const Tensor d_w_hq = at::mm(d_hq.view({T * B, 3 * H + A}).t(), h_prev.reshape({T * B, H}));
    const Tensor d_w_ctx = at::mm(d_gi.view({T * B, 3 * H}).t(), contexts.view({T * B, C}));
    const Tensor g_values = at::bmm(alpha.permute({1, 2, 0}), d_ctx.transpose(0, 1));  // sum_t a_t^T dc_t  [B, S, C]
    const Tensor g_v = at::mv(e.view({T * B * S, A}).t(), d_scores.view({T * B * S}));
    return {d_gi.transpose(0, 1), dh, d_pre.sum(0), g_values, Tensor(), d_w_ctx, d_w_hq.narrow(0, 0, 3 * H),
            d_hq.narrow(2, 0, 3 * H).sum(torch::IntArrayRef{0, 1}), d_w_hq.narrow(0, 3 * H, A), g_v, Tensor()};
  }
};
}  // namespace

// Under bf16 autocast both recurrences run in float32 with autocast off (common/precision.h): their buffers are
// written in place in one dtype, and the state carried across steps keeps float32's precision.
torch::Tensor gru_sequences_device(const Tensor& gi_x, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
  const NoAutocast fp32(gi_x.device());
  const auto f = float_if_reduced;
  return GruSequencesDevice::apply(f(gi_x), f(h0), f(w_hh), f(b_hh));
}

std::vector<torch::Tensor> additive_gru_recurrence_device(const Tensor& gi_x, const Tensor& h0, const Tensor& keys,
                                                          const Tensor& values, const Tensor& mask, const Tensor& w_ctx,
                                                          const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_q,
                                                          const Tensor& v, bool keep) {
  const NoAutocast fp32(gi_x.device());
  const auto f = float_if_reduced;
  return AdditiveGruDevice::apply(f(gi_x), f(h0), f(keys), f(values), mask, f(w_ctx), f(w_hh), f(b_hh), f(w_q), f(v), keep);
}

}  // namespace attnmt
