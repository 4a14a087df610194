#include "kernels/gru_recurrence.h"

#include <limits>
#include <vector>

#include "kernels/additive_scores.h"
#include "kernels/gru_recurrence_device.h"
#include "kernels/gru_gates.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"

namespace attnmt {

namespace {
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Backward of gru_cell for the gradient dh of h': writes the gradients of gi and gh into dgi and dgh ([B, 3H]
// views) and returns the direct part of the gradient of h (dh z; the part through gh is dgh W_hh).
Tensor gru_cell_backward(const Tensor& dh, const Tensor& h, const Tensor& rz, const Tensor& n, const Tensor& gh_n, Tensor dgi,
                         Tensor dgh, int64_t H) {
  Tensor direct;
  if (gru_cell_backward_kernel(dh, h, rz, n, gh_n, dgi, dgh, &direct)) return direct;  // float CPU: one pass per row
  const Tensor r = rz.narrow(1, 0, H), z = rz.narrow(1, H, H);
  const Tensor d_pre_n = dh * (1 - z) * (1 - n * n);  // through tanh
  dgi.narrow(1, 0, H).copy_(d_pre_n * gh_n * r * (1 - r));
  dgi.narrow(1, H, H).copy_(dh * (h - n) * z * (1 - z));
  dgi.narrow(1, 2 * H, H).copy_(d_pre_n);
  dgh.narrow(1, 0, 2 * H).copy_(dgi.narrow(1, 0, 2 * H));
  dgh.narrow(1, 2 * H, H).copy_(d_pre_n * r);
  return dh * z;
}

// A one-layer GRU over all steps from precomputed input gates: the backward computes W_hh's gradient as one
// product over all T x B rows (ATen's GRU: T products of B rows, each added into the gradient).
struct GruSequence : public torch::autograd::Function<GruSequence> {
  static Tensor forward(AutogradContext* ctx, const Tensor& gi_x, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
    const int64_t T = gi_x.size(1), H = h0.size(1);
    const Tensor gi_steps = gi_x.transpose(0, 1);  // [T, B, 3H]
    PackedLinear hh_product;  // B rows per step: W_hh packed once for all T steps (kernels/packed_product.h)
    std::vector<Tensor> hs = {h0}, rz, n, ghn;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor gh = hh_product(hs.back(), w_hh, b_hh);
      GruCell c = gru_cell(gi_steps[t], gh, hs.back(), H);
      hs.push_back(c.h);
      rz.push_back(c.rz);
      n.push_back(c.n);
      ghn.push_back(gh.narrow(1, 2 * H, H));  // the backward needs only the n part of W_hh h + b_hh
    }
    const Tensor h_all = torch::stack(hs, 0);  // [T + 1, B, H]
    ctx->save_for_backward({h_all, torch::stack(rz, 0), torch::stack(n, 0), torch::stack(ghn, 0), w_hh});
    return h_all.narrow(0, 1, T).transpose(0, 1);  // [B, T, H]
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &h_all = s[0], &rz = s[1], &n = s[2], &ghn = s[3], &w_hh = s[4];
    const int64_t T = rz.size(0), B = rz.size(1), H = h_all.size(2), G = 3 * H;
    const Tensor dy = grads[0].transpose(0, 1);  // [T, B, H]
    Tensor d_gi = torch::empty({T, B, G}, h_all.options()), d_gh = torch::empty({T, B, G}, h_all.options());
    Tensor dh = torch::zeros({B, H}, h_all.options());
    const Tensor w_hh_t = w_hh.t();  // the product with W_hh itself: its transpose packed once
    PackedLinear hh_product;
    for (int64_t t = T - 1; t >= 0; --t) {
      const Tensor direct = gru_cell_backward(dh + dy[t], h_all[t], rz[t], n[t], ghn[t], d_gi[t], d_gh[t], H);
      dh = hh_product(d_gh[t], w_hh_t, Tensor()).add_(direct);
    }
    const Tensor d_w_hh = product(d_gh.view({T * B, G}).t(), h_all.narrow(0, 0, T).reshape({T * B, H}));
    return {d_gi.transpose(0, 1), dh, d_w_hh, d_gh.sum(torch::IntArrayRef{0, 1})};
  }
};

struct AdditiveGru : public torch::autograd::Function<AdditiveGru> {
  static tensor_list forward(AutogradContext* ctx, const Tensor& gi_x, const Tensor& h0, const Tensor& keys, const Tensor& values,
                             const Tensor& mask, const Tensor& w_ctx, const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_q,
                             const Tensor& v, bool keep) {
    const int64_t T = gi_x.size(1), H = h0.size(1), A = keys.size(2);
    const Tensor w_hq = torch::cat({w_hh, w_q}, 0);                          // [3H + A, H]
    const Tensor b_hq = torch::cat({b_hh, torch::zeros({A}, b_hh.options())});  // the query has no bias
    const Tensor gi_steps = gi_x.transpose(0, 1);                             // [T, B, 3H]
    const Tensor blocked = mask.logical_not();
    // The per-step products have B rows each: their weights are packed once for all T steps (kernels/packed_product.h).
    PackedLinear hq_product, ctx_product;
    std::vector<Tensor> hs = {h0}, rz, n, ghn, queries, alpha, ctxs;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor& h = hs.back();
      const Tensor hq = hq_product(h, w_hq, b_hq);  // [B, 3H + A]: W_hh s + b_hh, and the query W_q s
      const Tensor query = hq.narrow(1, 3 * H, A);  // the backward recomputes tanh(W_q s + U h_j) from it
      const Tensor scores = additive_scores_forward(query.unsqueeze(1), keys, v, nullptr).squeeze(1);
      const Tensor a = torch::softmax(scores.masked_fill(blocked, -std::numeric_limits<double>::infinity()), 1);
      const Tensor c = weighted_values(a, values);                      // [B, C]
      const Tensor gi = ctx_product(c, w_ctx, Tensor()).add_(gi_steps[t]);  // [B, 3H]
      GruCell cell = gru_cell(gi, hq, h, H);
      hs.push_back(cell.h);
      rz.push_back(cell.rz);
      n.push_back(cell.n);
      ghn.push_back(hq.narrow(1, 2 * H, H));
      if (keep) queries.push_back(query);
      alpha.push_back(a);
      ctxs.push_back(c);
    }
    const Tensor weights = torch::stack(alpha, 1);  // [B, T, S]
    ctx->mark_non_differentiable({weights});
    if (!keep) return {torch::stack(tensor_list(hs.begin() + 1, hs.end()), 1), torch::stack(ctxs, 1), weights};
    const Tensor h_all = torch::stack(hs, 0);  // [T + 1, B, H]
    const Tensor c_all = torch::stack(ctxs, 0);  // [T, B, C]
    const Tensor a_all = torch::stack(alpha, 0);  // [T, B, S]
    tensor_list saved = {h_all, c_all, a_all, torch::stack(rz, 0), torch::stack(n, 0), torch::stack(ghn, 0),
                         keys, values, w_ctx, w_hq, v, torch::stack(queries, 0)};
    ctx->save_for_backward(saved);
    return {h_all.narrow(0, 1, T).transpose(0, 1), c_all.transpose(0, 1), weights};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &h_all = s[0], &c_all = s[1], &a_all = s[2], &rz = s[3], &n = s[4], &ghn = s[5], &keys = s[6], &values = s[7],
                 &w_ctx = s[8], &w_hq = s[9], &v = s[10], &queries = s[11];
    const int64_t T = c_all.size(0), B = c_all.size(1), H = h_all.size(2), A = keys.size(2), G = 3 * H;
    const Tensor dy = grads[0].transpose(0, 1), dc_out = grads[1].transpose(0, 1);  // [T, B, H], [T, B, C]
    Tensor d_hq = torch::empty({T, B, G + A}, h_all.options());  // gradients of W_hh s + b_hh and of W_q s, per step
    Tensor d_gi = torch::empty({T, B, G}, h_all.options());      // gradients of the input gates, per step
    Tensor d_ctx = torch::empty({T, B, values.size(2)}, h_all.options());  // gradients of c_t, per step
    Tensor g_keys = torch::zeros_like(keys).contiguous(), g_v = torch::zeros_like(v);
    Tensor dh = torch::zeros({B, H}, h_all.options());
    // The products with w_ctx and w_hq themselves (not transposed): their transposes packed once for all T steps.
    const Tensor w_ctx_t = w_ctx.t(), w_hq_t = w_hq.t();
    PackedLinear dc_product, dh_product;
    for (int64_t t = T - 1; t >= 0; --t) {
      Tensor dgi = d_gi[t], dhq = d_hq[t];
      const Tensor direct = gru_cell_backward(dh + dy[t], h_all[t], rz[t], n[t], ghn[t], dgi, dhq.narrow(1, 0, G), H);
      // c_t = sum_j a_tj v_j, and c_t enters the gates through w_ctx and the readout (dc_out)
      const Tensor dc = dc_product(dgi, w_ctx_t, Tensor()).add_(dc_out[t]);  // [B, C]
      const Tensor a = a_all[t];                                // [B, S]
      const Tensor da = value_dots(values, dc);                 // [B, S]
      d_ctx[t].copy_(dc);  // the value gradient sum_t a_t^T dc_t is one product after the loop
      const Tensor d_scores = a * (da - (a * da).sum(1, true));  // softmax backward; 0 where masked
      const Tensor dq = additive_scores_backward_from_inputs(queries[t].unsqueeze(1), keys, v, d_scores.unsqueeze(1), g_keys, g_v);
      dhq.narrow(1, G, A).copy_(dq.squeeze(1));
      dh = dh_product(dhq, w_hq_t, Tensor()).add_(direct);  // to s_{t-1}: directly, through the gates and the query
    }
    // Weight gradients: one product over all T x B rows each.
    const Tensor d_w_hq = product(d_hq.view({T * B, G + A}).t(), h_all.narrow(0, 0, T).reshape({T * B, H}));
    const Tensor d_w_ctx = product(d_gi.view({T * B, G}).t(), c_all.reshape({T * B, c_all.size(2)}));
    const Tensor g_values = batched_product(a_all.permute({1, 2, 0}), d_ctx.transpose(0, 1));  // sum_t a_t^T dc_t  [B, S, C]
    const Tensor d_b_hh = d_hq.narrow(2, 0, G).sum(torch::IntArrayRef{0, 1});
    return {d_gi.transpose(0, 1), dh, g_keys, g_values, Tensor(), d_w_ctx, d_w_hq.narrow(0, 0, G), d_b_hh,
            d_w_hq.narrow(0, G, A), g_v, Tensor()};
  }
};
}  // namespace

GruCell gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h, int64_t H) {
  GruCell c;
  if (gru_cell_kernel(gi, gh.narrow(1, 0, 3 * H), h, H, &c.h, &c.rz, &c.n)) return c;  // float CPU: one pass per row
  Tensor g = (gi.narrow(1, 0, 2 * H) + gh.narrow(1, 0, 2 * H)).sigmoid_();
  Tensor nt = torch::addcmul(gi.narrow(1, 2 * H, H), g.narrow(1, 0, H), gh.narrow(1, 2 * H, H)).tanh_();
  Tensor h_new = torch::addcmul(nt, g.narrow(1, H, H), h - nt);  // n + z (h - n)
  return {h_new, g, nt};
}

torch::Tensor gru_sequence(const Tensor& gi_x, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
  TORCH_CHECK(gi_x.dim() == 3 && h0.dim() == 2 && gi_x.size(0) == h0.size(0) && gi_x.size(2) == 3 * h0.size(1),
              "gru_sequence: gi_x [B, T, 3H] and h0 [B, H] expected, got ", gi_x.sizes(), " and ", h0.sizes());
  const int64_t H = h0.size(1);
  TORCH_CHECK(w_hh.sizes() == torch::IntArrayRef({3 * H, H}) && b_hh.sizes() == torch::IntArrayRef({3 * H}),
              "gru_sequence: w_hh [3H, H] and b_hh [3H] expected for H = ", H, ", got ", w_hh.sizes(), " and ", b_hh.sizes());
  if (!kernels_for(gi_x)) return gru_sequences_device(gi_x.unsqueeze(0), h0.unsqueeze(0), w_hh.unsqueeze(0), b_hh.unsqueeze(0))[0];
  return GruSequence::apply(gi_x, h0, w_hh, b_hh);
}

torch::Tensor gru_sequences(const Tensor& gi_x, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh) {
  TORCH_CHECK(gi_x.dim() == 4 && h0.dim() == 3 && w_hh.dim() == 3 && b_hh.dim() == 2 && gi_x.size(0) == h0.size(0) &&
                  gi_x.size(1) == h0.size(1) && gi_x.size(3) == 3 * h0.size(2) && w_hh.size(0) == gi_x.size(0) &&
                  w_hh.size(1) == 3 * h0.size(2) && w_hh.size(2) == h0.size(2) && b_hh.size(0) == gi_x.size(0) &&
                  b_hh.size(1) == 3 * h0.size(2),
              "gru_sequences: gi_x [D, B, T, 3H], h0 [D, B, H], w_hh [D, 3H, H], b_hh [D, 3H] expected, got ", gi_x.sizes(), ", ",
              h0.sizes(), ", ", w_hh.sizes(), ", ", b_hh.sizes());
  if (!kernels_for(gi_x)) return gru_sequences_device(gi_x, h0, w_hh, b_hh);
  std::vector<Tensor> ys;
  for (int64_t d = 0; d < gi_x.size(0); ++d) ys.push_back(GruSequence::apply(gi_x[d], h0[d], w_hh[d], b_hh[d]));
  return torch::stack(ys, 0);
}

AdditiveGruRecurrence additive_gru_recurrence(const Tensor& gi_x, const Tensor& h0, const Tensor& keys, const Tensor& values,
                                              const Tensor& mask, const Tensor& w_ctx, const Tensor& w_hh, const Tensor& b_hh,
                                              const Tensor& w_q, const Tensor& v) {
  TORCH_CHECK(gi_x.dim() == 3 && h0.dim() == 2 && keys.dim() == 3 && values.dim() == 3 && mask.dim() == 2,
              "additive_gru_recurrence: gi_x [B, T, 3H], h0 [B, H], keys [B, S, A], values [B, S, C], mask [B, S] expected, got ",
              gi_x.sizes(), ", ", h0.sizes(), ", ", keys.sizes(), ", ", values.sizes(), ", ", mask.sizes());
  const int64_t B = gi_x.size(0), H = h0.size(1), S = keys.size(1), A = keys.size(2), C = values.size(2);
  TORCH_CHECK(gi_x.size(2) == 3 * H && h0.size(0) == B && keys.size(0) == B && values.size(0) == B && values.size(1) == S &&
                  mask.size(0) == B && mask.size(1) == S,
              "additive_gru_recurrence: batch, length or gate sizes disagree");
  TORCH_CHECK(w_ctx.sizes() == torch::IntArrayRef({3 * H, C}) && w_hh.sizes() == torch::IntArrayRef({3 * H, H}) &&
                  b_hh.sizes() == torch::IntArrayRef({3 * H}) && w_q.sizes() == torch::IntArrayRef({A, H}) &&
                  v.sizes() == torch::IntArrayRef({A}),
              "additive_gru_recurrence: weight shapes disagree with H = ", H, ", A = ", A, ", C = ", C);
  bool keep = false;  // per-step states and queries, kept only when a gradient will be asked for
  if (torch::GradMode::is_enabled())
    for (const Tensor* t : {&gi_x, &h0, &keys, &values, &w_ctx, &w_hh, &b_hh, &w_q, &v}) keep = keep || t->requires_grad();
  auto out = kernels_for(gi_x) ? AdditiveGru::apply(gi_x, h0, keys, values, mask, w_ctx, w_hh, b_hh, w_q, v, keep)
                                : additive_gru_recurrence_device(gi_x, h0, keys, values, mask, w_ctx, w_hh, b_hh, w_q, v, keep);
  return {out[0], out[1], out[2]};
}

}  // namespace attnmt
