#include "kernels/additive_scores.h"

#include "kernels/share_threads.h"
#include "kernels/lanes.h"
#include "kernels/mode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace attnmt {

namespace {
// The arguments of one additive-score pass: wq [B, T, A], keys [B, S, A], v [A], tanh values [B, T, S, A] or
// null, scores [B, T, S]; contiguous floats.
struct AdditiveArgs {
  const float *wq, *keys, *v;
  float *tanh, *out;
  int64_t T, S, A;
};

// scores[b,t,s] = sum_a v[a] tanh(wq[b,t,a] + k[b,s,a]) for the sentences b0 .. b1 - 1, in one pass over the
// keys (ATen needs three: add, tanh, product), N lanes at a time and a scalar tail.
template <int N>
__attribute__((always_inline)) inline void additive_rows(const AdditiveArgs& x, int64_t b0, int64_t b1) {
  using F = typename Lanes<N>::type;
  const int64_t T = x.T, S = x.S, A = x.A;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* q = x.wq + (b * T + t) * A;
      for (int64_t s = 0; s < S; ++s) {
        const float* k = x.keys + (b * S + s) * A;
        float* e = x.tanh ? x.tanh + ((b * T + t) * S + s) * A : nullptr;
        F acc = F{};
        int64_t a = 0;
        for (; a + N <= A; a += N) {
          F qa, ka, va;
          std::memcpy(&qa, q + a, sizeof qa);
          std::memcpy(&ka, k + a, sizeof ka);
          std::memcpy(&va, x.v + a, sizeof va);
          const F th = tanh_lanes<N>(qa + ka);
          if (e) std::memcpy(e + a, &th, sizeof th);
          acc += va * th;
        }
        float sum = 0;
        for (int i = 0; i < N; ++i) sum += acc[i];
        for (; a < A; ++a) {
          const float th = std::tanh(q[a] + k[a]);
          if (e) e[a] = th;
          sum += x.v[a] * th;
        }
        x.out[(b * T + t) * S + s] = sum;
      }
    }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void additive_rows_avx2(const AdditiveArgs& x, int64_t b0, int64_t b1) {
  additive_rows<8>(x, b0, b1);
}
__attribute__((target("avx512f"))) void additive_rows_avx512(const AdditiveArgs& x, int64_t b0, int64_t b1) {
  additive_rows<16>(x, b0, b1);
}
#endif

// The widest lane count this CPU supports, capped by set_additive_lanes (tests).
std::atomic<int> max_lanes_cap{16};
int additive_lanes_now() { return std::min(cpu_lanes(), max_lanes_cap.load()); }

void additive_forward_float(const AdditiveArgs& x, int64_t B) {
  const int lanes = additive_lanes_now();
  share_rows(B, 8, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, additive_rows, additive_rows<4>, x, b0, b1);
  });
}

// The context sum_s a[b, s] v[b, s, :] and the dots v[b, s, :] . d[b, :] for sentences b0 .. b1 - 1.
struct ValueArgs {
  const float* a;  // [B, S] weights (weighted_values) or null
  const float* v;  // [B, S, C]
  const float* d;  // [B, C] (value_dots) or null
  float* out;      // [B, C] or [B, S]
  int64_t S, C;
};

template <int N>
__attribute__((always_inline)) inline void value_rows(const ValueArgs& x, int64_t b0, int64_t b1) {
  using F = typename Lanes<N>::type;
  const int64_t S = x.S, C = x.C;
  for (int64_t b = b0; b < b1; ++b) {
    const float* vb = x.v + b * S * C;
    if (x.a) {  // out[b, :] = sum_s a[b, s] v[b, s, :], s in order
      float* o = x.out + b * C;
      int64_t c = 0;
      for (; c + N <= C; c += N) {
        F acc = F{};
        for (int64_t s = 0; s < S; ++s) {
          F vv;
          std::memcpy(&vv, vb + s * C + c, sizeof vv);
          acc += x.a[b * S + s] * vv;
        }
        std::memcpy(o + c, &acc, sizeof acc);
      }
      for (; c < C; ++c) {
        float acc = 0;
        for (int64_t s = 0; s < S; ++s) acc += x.a[b * S + s] * vb[s * C + c];
        o[c] = acc;
      }
    } else {  // out[b, s] = v[b, s, :] . d[b, :]
      const float* d = x.d + b * C;
      for (int64_t s = 0; s < S; ++s) {
        const float* vs = vb + s * C;
        F acc = F{};
        int64_t c = 0;
        for (; c + N <= C; c += N) {
          F vv, dd;
          std::memcpy(&vv, vs + c, sizeof vv);
          std::memcpy(&dd, d + c, sizeof dd);
          acc += vv * dd;
        }
        float sum = 0;
        for (int i = 0; i < N; ++i) sum += acc[i];
        for (; c < C; ++c) sum += vs[c] * d[c];
        x.out[b * S + s] = sum;
      }
    }
  }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void value_rows_avx2(const ValueArgs& x, int64_t b0, int64_t b1) { value_rows<8>(x, b0, b1); }
__attribute__((target("avx512f"))) void value_rows_avx512(const ValueArgs& x, int64_t b0, int64_t b1) { value_rows<16>(x, b0, b1); }
#endif

void value_pass(const ValueArgs& x, int64_t B) {
  const int lanes = additive_lanes_now();
  share_rows(B, 8, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, value_rows, value_rows<4>, x, b0, b1);
  });
}

// The backward from the forward's inputs: tanh(wq + k) recomputed per key row (the same lanes as the forward,
// so the same values), then d = g v (1 - e^2) added into the query's and the key's gradients and g e into v's,
// for sentences b0 .. b1 - 1. gv: one [A] row per sentence (threads own sentences).
struct AdditiveBackArgs {
  const float *wq, *keys, *v, *g;  // [B, T, A], [B, S, A], [A], [B, T, S]
  float *gq, *gk, *gv;             // [B, T, A] (zeroed), [B, S, A] (added into), [B, A] (zeroed)
  int64_t T, S, A;
};

template <int N>
__attribute__((always_inline)) inline void additive_backward_rows(const AdditiveBackArgs& x, int64_t b0, int64_t b1) {
  using F = typename Lanes<N>::type;
  const int64_t T = x.T, S = x.S, A = x.A;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* q = x.wq + (b * T + t) * A;
      float* gq = x.gq + (b * T + t) * A;
      float* gv = x.gv + b * A;
      for (int64_t s = 0; s < S; ++s) {
        const float c = x.g[(b * T + t) * S + s];
        if (c == 0) continue;  // masked positions: softmax gave them no gradient
        const float* k = x.keys + (b * S + s) * A;
        float* gk = x.gk + (b * S + s) * A;
        int64_t a = 0;
        for (; a + N <= A; a += N) {
          F qa, ka, va, gqa, gka, gva;
          std::memcpy(&qa, q + a, sizeof qa);
          std::memcpy(&ka, k + a, sizeof ka);
          std::memcpy(&va, x.v + a, sizeof va);
          const F e = tanh_lanes<N>(qa + ka);
          const F d = c * va * (1.0f - e * e);
          std::memcpy(&gqa, gq + a, sizeof gqa);
          std::memcpy(&gka, gk + a, sizeof gka);
          std::memcpy(&gva, gv + a, sizeof gva);
          gqa += d, gka += d, gva += c * e;
          std::memcpy(gq + a, &gqa, sizeof gqa);
          std::memcpy(gk + a, &gka, sizeof gka);
          std::memcpy(gv + a, &gva, sizeof gva);
        }
        for (; a < A; ++a) {
          const float e = std::tanh(q[a] + k[a]);
          const float d = c * x.v[a] * (1.0f - e * e);
          gq[a] += d, gk[a] += d, gv[a] += c * e;
        }
      }
    }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void additive_backward_avx2(const AdditiveBackArgs& x, int64_t b0, int64_t b1) {
  additive_backward_rows<8>(x, b0, b1);
}
__attribute__((target("avx512f"))) void additive_backward_avx512(const AdditiveBackArgs& x, int64_t b0, int64_t b1) {
  additive_backward_rows<16>(x, b0, b1);
}
#endif

bool float_cpu(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
  for (const auto* t : {&a, &b, &c})
    if (!kernels_for(*t)) return false;
  return true;
}
}  // namespace

int set_additive_lanes(int max_lanes) {
  TORCH_CHECK(max_lanes == 4 || max_lanes == 8 || max_lanes == 16, "set_additive_lanes: 4, 8 or 16, got ", max_lanes);
  max_lanes_cap = max_lanes;
  return additive_lanes_now();
}

torch::Tensor additive_scores_forward(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v,
                                      torch::Tensor* e_out) {
  if (!float_cpu(wq, keys, v)) {  // double (tests) and other devices: ATen's ops
    torch::Tensor e = (wq.unsqueeze(2) + keys.unsqueeze(1)).tanh_();  // [B, T, S, A]
    if (e_out) *e_out = e;
    return torch::matmul(e, v);  // [B, T, S]
  }
  const torch::Tensor q = wq.contiguous(), k = keys.contiguous(), vc = v.contiguous();
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), A = q.size(2);
  torch::Tensor scores = torch::empty({B, T, S}, q.options());
  torch::Tensor e = e_out ? torch::empty({B, T, S, A}, q.options()) : torch::Tensor();
  additive_forward_float({q.data_ptr<float>(), k.data_ptr<float>(), vc.data_ptr<float>(), e_out ? e.data_ptr<float>() : nullptr,
                          scores.data_ptr<float>(), T, S, A},
                         B);
  if (e_out) *e_out = e;
  return scores;
}

torch::Tensor additive_scores_backward(const torch::Tensor& e, const torch::Tensor& v, const torch::Tensor& grad_scores,
                                       torch::Tensor& g_keys, torch::Tensor& g_v) {
  const torch::Tensor gs = grad_scores.contiguous();  // [B, T, S]
  const int64_t B = e.size(0), T = e.size(1), S = e.size(2), A = e.size(3);
  if (!kernels_for(e) || !e.is_contiguous() || !g_keys.is_contiguous()) {  // other devices: the same math in composed ops
    torch::Tensor g = gs.unsqueeze(-1) * v * (1 - e * e);
    g_keys.add_(g.sum(1));
    g_v.add_((gs.unsqueeze(-1) * e).sum({0, 1, 2}));
    return g.sum(2);
  }
  torch::Tensor g_wq = torch::zeros({B, T, A}, e.options());
  torch::Tensor g_v_rows = torch::zeros({B, A}, e.options());  // per-sentence partial sums (threads own rows)
  const torch::Tensor vc = v.contiguous();
  AT_DISPATCH_FLOATING_TYPES(e.scalar_type(), "additive_scores_backward", [&] {
    const scalar_t* E = e.data_ptr<scalar_t>();
    const scalar_t* G = gs.data_ptr<scalar_t>();
    const scalar_t* V = vc.data_ptr<scalar_t>();
    scalar_t* GQ = g_wq.data_ptr<scalar_t>();
    scalar_t* GK = g_keys.data_ptr<scalar_t>();
    scalar_t* GV = g_v_rows.data_ptr<scalar_t>();
    share_rows(B, 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t t = 0; t < T; ++t) {
          scalar_t* __restrict__ gq = GQ + (b * T + t) * A;
          for (int64_t s = 0; s < S; ++s) {
            const scalar_t c = G[(b * T + t) * S + s];
            if (c == 0) continue;  // masked positions: softmax gave them no gradient
            const scalar_t* __restrict__ er = E + ((b * T + t) * S + s) * A;
            scalar_t* __restrict__ gk = GK + (b * S + s) * A;
            scalar_t* __restrict__ gv = GV + b * A;
            for (int64_t a = 0; a < A; ++a) {
              const scalar_t x = er[a];
              const scalar_t d = c * V[a] * (1 - x * x);  // d score / d pre-activation
              gq[a] += d;
              gk[a] += d;
              gv[a] += c * x;
            }
          }
        }
    });
  });
  g_v.add_(g_v_rows.sum(0));
  return g_wq;
}

torch::Tensor weighted_values(const torch::Tensor& a, const torch::Tensor& values) {
  TORCH_CHECK(a.dim() == 2 && values.dim() == 3 && a.size(0) == values.size(0) && a.size(1) == values.size(1),
              "weighted_values: a [B, S] and values [B, S, C] expected, got ", a.sizes(), " and ", values.sizes());
  if (!float_cpu(a, values, values)) return torch::bmm(a.unsqueeze(1), values).squeeze(1);
  const torch::Tensor ac = a.contiguous(), vc = values.contiguous();
  const int64_t B = vc.size(0), S = vc.size(1), C = vc.size(2);
  torch::Tensor out = torch::empty({B, C}, vc.options());
  value_pass({ac.data_ptr<float>(), vc.data_ptr<float>(), nullptr, out.data_ptr<float>(), S, C}, B);
  return out;
}

torch::Tensor value_dots(const torch::Tensor& values, const torch::Tensor& dc) {
  TORCH_CHECK(dc.dim() == 2 && values.dim() == 3 && dc.size(0) == values.size(0) && dc.size(1) == values.size(2),
              "value_dots: values [B, S, C] and dc [B, C] expected, got ", values.sizes(), " and ", dc.sizes());
  if (!float_cpu(dc, values, values)) return torch::bmm(values, dc.unsqueeze(2)).squeeze(2);
  const torch::Tensor dcc = dc.contiguous(), vc = values.contiguous();
  const int64_t B = vc.size(0), S = vc.size(1), C = vc.size(2);
  torch::Tensor out = torch::empty({B, S}, vc.options());
  value_pass({nullptr, vc.data_ptr<float>(), dcc.data_ptr<float>(), out.data_ptr<float>(), S, C}, B);
  return out;
}

torch::Tensor additive_scores_backward_from_inputs(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v,
                                                   const torch::Tensor& grad_scores, torch::Tensor& g_keys, torch::Tensor& g_v) {
  TORCH_CHECK(wq.dim() == 3 && keys.dim() == 3 && v.dim() == 1 && grad_scores.dim() == 3 && wq.size(0) == keys.size(0) &&
                  wq.size(2) == keys.size(2) && keys.size(2) == v.size(0) && grad_scores.size(0) == wq.size(0) &&
                  grad_scores.size(1) == wq.size(1) && grad_scores.size(2) == keys.size(1) && g_keys.sizes() == keys.sizes(),
              "additive_scores_backward_from_inputs: wq [B, T, A], keys [B, S, A], v [A], grad [B, T, S] expected, got ", wq.sizes(),
              ", ", keys.sizes(), ", ", v.sizes(), ", ", grad_scores.sizes());
  if (!float_cpu(wq, keys, v) || !float_cpu(grad_scores, g_keys, g_v) || !g_keys.is_contiguous()) {
    const torch::Tensor e = (wq.unsqueeze(2) + keys.unsqueeze(1)).tanh_();
    return additive_scores_backward(e.contiguous(), v, grad_scores, g_keys, g_v);
  }
  const torch::Tensor q = wq.contiguous(), k = keys.contiguous(), vc = v.contiguous(), gs = grad_scores.contiguous();
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), A = q.size(2);
  torch::Tensor g_wq = torch::zeros({B, T, A}, q.options()), g_v_rows = torch::zeros({B, A}, q.options());
  const AdditiveBackArgs x{q.data_ptr<float>(), k.data_ptr<float>(), vc.data_ptr<float>(), gs.data_ptr<float>(),
                           g_wq.data_ptr<float>(), g_keys.data_ptr<float>(), g_v_rows.data_ptr<float>(), T, S, A};
  const int lanes = additive_lanes_now();
  share_rows(B, 8, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, additive_backward, additive_backward_rows<4>, x, b0, b1);
  });
  g_v.add_(g_v_rows.sum(0));
  return g_wq;
}

}  // namespace attnmt
