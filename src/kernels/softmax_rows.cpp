#include "kernels/softmax_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/lanes.h"
#include "kernels/mode.h"
#include "kernels/share_threads.h"

namespace attnmt {

namespace {
// exp(x) for x <= 0 (x below -87 is taken as -87: its exponential, ~1.6e-38, is nothing next to the
// row's largest term, which is 1): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by Cephes' degree-6
// polynomial (relative error about 1e-7), 2^n from the exponent bits.
template <int N>
__attribute__((always_inline)) inline typename Lanes<N>::type exp_nonpositive(typename Lanes<N>::type x) {
  using F = typename Lanes<N>::type;
  using I = typename Lanes<N>::itype;
  const F lo = F{} - 87.0f;
  x = x < lo ? lo : x;
  const I n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, I);  // truncation: round to nearest for x <= 0
  const F fn = __builtin_convertvector(n, F);
  const F r = x - fn * 0.693359375f + fn * 2.12194440e-4f;  // ln 2 in two parts: r stays exact
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I bits = (n + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// sum_v exp(x_v - m) over a row of V logits whose maximum is m: four accumulators, so that each lane adds a
// quarter of the terms (less rounding on 8,000-word rows), and a scalar tail.
template <int N>
__attribute__((always_inline)) inline float sum_exp_lanes(const float* x, int64_t V, float m) {
  using F = typename Lanes<N>::type;
  F acc[4] = {F{}, F{}, F{}, F{}};
  int64_t v = 0;
  for (; v + 4 * N <= V; v += 4 * N)
    for (int j = 0; j < 4; ++j) {
      F a;
      std::memcpy(&a, x + v + j * N, sizeof a);
      acc[j] += exp_nonpositive<N>(a - m);
    }
  for (; v + N <= V; v += N) {
    F a;
    std::memcpy(&a, x + v, sizeof a);
    acc[0] += exp_nonpositive<N>(a - m);
  }
  const F total = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  float sum = 0;
  for (int i = 0; i < N; ++i) sum += total[i];
  for (; v < V; ++v) sum += std::exp(x[v] - m);
  return sum;
}

template <int N>
__attribute__((always_inline)) inline void argmax_rows(const float* X, int64_t V, int64_t b0, int64_t b1, int64_t* ids,
                                                       float* logp) {
  using F = typename Lanes<N>::type;
  for (int64_t b = b0; b < b1; ++b) {
    const float* x = X + b * V;
    float m = -std::numeric_limits<float>::infinity();
    int64_t v = 0;
    if (V >= N) {
      F mv;
      std::memcpy(&mv, x, sizeof mv);
      for (v = N; v + N <= V; v += N) {
        F a;
        std::memcpy(&a, x + v, sizeof a);
        mv = a > mv ? a : mv;
      }
      for (int i = 0; i < N; ++i) m = std::max(m, mv[i]);
    }
    for (; v < V; ++v) m = std::max(m, x[v]);
    int64_t arg = 0;
    while (arg < V && !(x[arg] == m)) ++arg;
    if (arg == V) arg = 0;  // a row of NaN: its log-probability below is NaN too
    ids[b] = arg;
    logp[b] = -std::log(sum_exp_lanes<N>(x, V, m));
  }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void argmax_rows_avx2(const float* X, int64_t V, int64_t b0, int64_t b1, int64_t* ids,
                                                      float* logp) {
  argmax_rows<8>(X, V, b0, b1, ids, logp);
}
__attribute__((target("avx512f"))) void argmax_rows_avx512(const float* X, int64_t V, int64_t b0, int64_t b1,
                                                          int64_t* ids, float* logp) {
  argmax_rows<16>(X, V, b0, b1, ids, logp);
}
#endif

// The label-smoothed cross-entropy's rows and gradient (see softmax_rows.h).
struct CrossEntropyArgs {
  const float* x;        // [N, V]
  const int64_t* t;      // [N] targets, in [0, V)
  const bool* valid;     // [N] (forward)
  const float* lse;      // [N] (backward)
  const float* scale;    // [N] (backward)
  float* loss;           // [N] (forward)
  float* lse_out;        // [N] (forward)
  float* grad;           // [N, V] (backward)
  int64_t V;
  float eps;
};

// A row with a non-finite logit, in double: NaN if any logit is NaN, else +-inf where the maximum is infinite.
double row_lse_slow(const float* x, int64_t V) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (std::isnan(x[v])) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, static_cast<double>(x[v]));
  }
  if (std::isinf(m)) return m;
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - m);
  return m + std::log(s);
}

template <int N>
__attribute__((always_inline)) inline void cross_entropy_forward_rows(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  using F = typename Lanes<N>::type;
  const int64_t V = a.V;
  for (int64_t r = r0; r < r1; ++r) {
    if (!a.valid[r]) {
      a.loss[r] = 0;
      a.lse_out[r] = 0;
      continue;
    }
    const float* x = a.x + r * V;
    // Pass 1: the maximum and the sum (the sum is non-finite when a logit is: such rows go the slow way).
    float m = -std::numeric_limits<float>::infinity(), sum = 0;
    int64_t v = 0;
    if (V >= N) {
      F mv, sv;
      std::memcpy(&mv, x, sizeof mv);
      sv = mv;
      for (v = N; v + N <= V; v += N) {
        F c;
        std::memcpy(&c, x + v, sizeof c);
        mv = c > mv ? c : mv;
        sv += c;
      }
      for (int i = 0; i < N; ++i) {
        m = std::max(m, mv[i]);
        sum += sv[i];
      }
    }
    for (; v < V; ++v) {
      m = std::max(m, x[v]);
      sum += x[v];
    }
    double lse;
    if (!std::isfinite(sum)) {
      lse = row_lse_slow(x, V);
      double total = 0;
      for (v = 0; v < V; ++v) total += x[v];
      sum = static_cast<float>(total);
    } else {
      lse = static_cast<double>(m) + std::log(static_cast<double>(sum_exp_lanes<N>(x, V, m)));  // pass 2
    }
    const double picked = x[a.t[r]], mean = static_cast<double>(sum) / static_cast<double>(V), eps = a.eps;
    a.loss[r] = static_cast<float>((1.0 - eps) * (lse - picked) + (eps > 0 ? eps * (lse - mean) : 0.0));
    a.lse_out[r] = static_cast<float>(lse);
  }
}

template <int N>
__attribute__((always_inline)) inline void cross_entropy_backward_rows(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  using F = typename Lanes<N>::type;
  const int64_t V = a.V;
  const float smooth = a.eps / static_cast<float>(V);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * V;
    float* g = a.grad + r * V;
    const float scale = a.scale[r], l = a.lse[r];
    if (scale == 0) {
      std::memset(g, 0, sizeof(float) * static_cast<size_t>(V));
      continue;
    }
    int64_t v = 0;
    if (std::isfinite(l)) {
      for (; v + N <= V; v += N) {
        F c;
        std::memcpy(&c, x + v, sizeof c);
        const F y = (exp_nonpositive<N>(c - l) - smooth) * scale;
        std::memcpy(g + v, &y, sizeof y);
      }
    }
    for (; v < V; ++v) g[v] = (std::exp(x[v] - l) - smooth) * scale;
    const int64_t t = a.t[r];
    g[t] = (std::exp(x[t] - l) - smooth + (a.eps - 1.0f)) * scale;
  }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void cross_entropy_forward_avx2(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  cross_entropy_forward_rows<8>(a, r0, r1);
}
__attribute__((target("avx512f"))) void cross_entropy_forward_avx512(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  cross_entropy_forward_rows<16>(a, r0, r1);
}
__attribute__((target("avx2"))) void cross_entropy_backward_avx2(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  cross_entropy_backward_rows<8>(a, r0, r1);
}
__attribute__((target("avx512f"))) void cross_entropy_backward_avx512(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  cross_entropy_backward_rows<16>(a, r0, r1);
}
#endif

bool cross_entropy_inputs_fit(const torch::Tensor& logits, const torch::Tensor& target) {
  TORCH_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0) && logits.size(1) > 0,
              "cross_entropy: logits [N, V] and target [N] expected, got ", logits.sizes(), " and ", target.sizes());
  if (!kernels_for(logits) || !target.is_cpu() || target.scalar_type() != torch::kLong)
    return false;
  const auto t = target.accessor<int64_t, 1>();
  for (int64_t i = 0; i < target.size(0); ++i)
    TORCH_CHECK(t[i] >= 0 && t[i] < logits.size(1), "cross_entropy: target ", t[i], " out of range for ", logits.size(1), " classes");
  return true;
}

}  // namespace

RowArgmax argmax_log_softmax(const torch::Tensor& logits, int max_lanes) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "argmax_log_softmax: logits must be [B, V] with V > 0, got ",
              logits.sizes());
  TORCH_CHECK(max_lanes == 4 || max_lanes == 8 || max_lanes == 16, "argmax_log_softmax: 4, 8 or 16 lanes, got ", max_lanes);
  RowArgmax out;
  if (!kernels_for(logits)) {  // the reference
    auto [best, arg] = torch::log_softmax(logits, -1).max(-1);
    out.ids = arg;
    out.logp = best;
    return out;
  }
  const torch::Tensor x = logits.contiguous();
  const int64_t B = x.size(0), V = x.size(1);
  out.ids = torch::empty({B}, torch::TensorOptions().dtype(torch::kLong));
  out.logp = torch::empty({B}, x.options());
  const float* X = x.data_ptr<float>();
  int64_t* ids = out.ids.data_ptr<int64_t>();
  float* lp = out.logp.data_ptr<float>();
  const int lanes = std::min(cpu_lanes(), max_lanes);
  share_rows(B, 16, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, argmax_rows, argmax_rows<4>, X, V, b0, b1, ids, lp);
  });
  return out;
}

bool cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& valid, double eps,
                        CrossEntropyRows* out, int max_lanes) {
  TORCH_CHECK(max_lanes == 4 || max_lanes == 8 || max_lanes == 16, "cross_entropy_rows: 4, 8 or 16 lanes, got ", max_lanes);
  if (!cross_entropy_inputs_fit(logits, target)) return false;
  TORCH_CHECK(valid.dim() == 1 && valid.size(0) == logits.size(0) && valid.scalar_type() == torch::kBool,
              "cross_entropy_rows: valid must be bool [N], got ", valid.sizes());
  const torch::Tensor x = logits.contiguous(), t = target.contiguous(), ok = valid.contiguous().cpu();
  const int64_t n = x.size(0);
  out->loss = torch::empty({n}, x.options());
  out->lse = torch::empty({n}, x.options());
  CrossEntropyArgs a{x.data_ptr<float>(), t.data_ptr<int64_t>(), ok.data_ptr<bool>(), nullptr, nullptr,
                     out->loss.data_ptr<float>(), out->lse.data_ptr<float>(), nullptr, x.size(1), static_cast<float>(eps)};
  const int lanes = std::min(cpu_lanes(), max_lanes);
  share_rows(n, 64, [&](int64_t r0, int64_t r1) {
    ATTNMT_LANES_CALL(lanes, cross_entropy_forward, cross_entropy_forward_rows<4>, a, r0, r1);
  });
  return true;
}

bool cross_entropy_grad(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& lse,
                        const torch::Tensor& scale, double eps, torch::Tensor* grad, int max_lanes) {
  TORCH_CHECK(max_lanes == 4 || max_lanes == 8 || max_lanes == 16, "cross_entropy_grad: 4, 8 or 16 lanes, got ", max_lanes);
  if (!cross_entropy_inputs_fit(logits, target)) return false;
  const int64_t n = logits.size(0);
  TORCH_CHECK(lse.sizes() == torch::IntArrayRef({n}) && scale.sizes() == torch::IntArrayRef({n}),
              "cross_entropy_grad: lse and scale must be [", n, "], got ", lse.sizes(), " and ", scale.sizes());
  const torch::Tensor x = logits.contiguous(), t = target.contiguous();
  const torch::Tensor l = lse.to(torch::kFloat).contiguous(), s = scale.to(torch::kFloat).contiguous();
  *grad = torch::empty_like(x);
  CrossEntropyArgs a{x.data_ptr<float>(), t.data_ptr<int64_t>(), nullptr, l.data_ptr<float>(), s.data_ptr<float>(),
                     nullptr, nullptr, grad->data_ptr<float>(), x.size(1), static_cast<float>(eps)};
  const int lanes = std::min(cpu_lanes(), max_lanes);
  share_rows(n, 64, [&](int64_t r0, int64_t r1) {
    ATTNMT_LANES_CALL(lanes, cross_entropy_backward, cross_entropy_backward_rows<4>, a, r0, r1);
  });
  return true;
}

}  // namespace attnmt
