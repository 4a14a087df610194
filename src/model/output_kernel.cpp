#include "model/output_kernel.h"

#include "model/lanes.h"


#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "common/runtime.h"
#include "common/share_threads.h"
#include "model/additive_kernel.h"

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

// The packed product. A panel holds 2N output columns for all K inputs ([K, 2N]); R rows of x at a time
// accumulate against it in R x 2 vector registers (16 of AVX-512's 32), one broadcast of x[r][k] and two
// loads of the panel per k. Rows are taken in blocks of kRowBlock and inputs in blocks of kDepthBlock, so that
// the block of x ([128, 512] floats, 256 KB) stays in the L2 cache while every panel's part ([512, 32], 64 KB)
// passes by once per block. After the first input block the sums continue from y as stored (float to float:
// the same sums in the same order as without blocks).
constexpr int kPanelLanes = 16;
constexpr int kPanel = 2 * kPanelLanes;  // output columns per panel
constexpr int kRows = 8;                  // rows per register block
constexpr int64_t kRowBlock = 128;
constexpr int64_t kDepthBlock = 512;

// init: where the sums start, bias (a row broadcast to all rows, ldi 0) or y's earlier partial sums.
// x's element (r, k) is x[r * sr + k * sk]: rows of a row-major matrix (sk 1) or of a transposed one (sr 1).
template <int N, int R>
__attribute__((always_inline)) inline void panel_rows(const float* x, int64_t sr, int64_t sk, int64_t kc, const float* panel,
                                                      const float* init, int64_t ldi, float* y, int64_t ldy) {
  using F = typename Lanes<N>::type;
  F acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    std::memcpy(&acc[r][0], init + r * ldi, sizeof(F));
    std::memcpy(&acc[r][1], init + r * ldi + N, sizeof(F));
  }
  for (int64_t k = 0; k < kc; ++k) {
    F w0, w1;
    std::memcpy(&w0, panel + k * 2 * N, sizeof w0);
    std::memcpy(&w1, panel + k * 2 * N + N, sizeof w1);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const F xr = F{} + x[r * sr + k * sk];
      acc[r][0] += xr * w0;
      acc[r][1] += xr * w1;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    std::memcpy(y + r * ldy, &acc[r][0], sizeof(F));
    std::memcpy(y + r * ldy + N, &acc[r][1], sizeof(F));
  }
}

struct PackedArgs {
  const float* x;       // [B, K], element (b, k) at x[b * sr + k * sk]
  int64_t sr, sk;
  const float* tail;    // [kRows, K] row-major: x's last B % kRows rows, then zeros
  const float* panels;  // [P, K, kPanel]
  const float* bias;    // [P * kPanel]
  float* y;             // [B, V]
  int64_t B, K, V;
};

template <int N>
__attribute__((always_inline)) inline void packed_panels(const PackedArgs& a, int64_t j0, int64_t j1) {
  constexpr int W = 2 * N;
  alignas(64) float part[kRows * W];
  const int64_t full_rows = a.B / kRows * kRows;
  for (int64_t k0 = 0; k0 < a.K || k0 == 0; k0 += kDepthBlock) {
    const int64_t kc = std::min(kDepthBlock, a.K - k0);
    const bool first = k0 == 0;
    for (int64_t rb = 0; rb < a.B; rb += kRowBlock) {
      const int64_t re = std::min(a.B, rb + kRowBlock);
      for (int64_t j = j0; j < j1; ++j) {
        const float* panel = a.panels + (j * a.K + k0) * W;
        const float* bias = a.bias + j * W;
        const int64_t col = j * W, cols = std::min<int64_t>(W, a.V - col);
        for (int64_t b = rb; b < re; b += kRows) {
          const bool whole_rows = b < full_rows;
          const float* x = whole_rows ? a.x + b * a.sr + k0 * a.sk : a.tail + k0;
          const int64_t sr = whole_rows ? a.sr : a.K, sk = whole_rows ? a.sk : 1;
          float* y = a.y + b * a.V + col;
          if (whole_rows && cols == W) {
            panel_rows<N, kRows>(x, sr, sk, kc, panel, first ? bias : y, first ? 0 : a.V, y, a.V);
            continue;
          }
          // A part of the panel or of the rows: through a buffer, which holds the partial sums between blocks.
          const int64_t rows = std::min<int64_t>(kRows, a.B - b);
          if (!first)
            for (int64_t r = 0; r < rows; ++r) std::memcpy(part + r * W, y + r * a.V, sizeof(float) * cols);
          panel_rows<N, kRows>(x, sr, sk, kc, panel, first ? bias : part, first ? 0 : W, part, W);
          for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * a.V, part + r * W, sizeof(float) * cols);
        }
      }
    }
  }
}

// panel_rows for R = rows (1 .. kRows) chosen at run time: the last rows of a batched product.
template <int N>
__attribute__((always_inline)) inline void some_panel_rows(int64_t rows, const float* x, int64_t sr, int64_t sk, int64_t kc,
                                                           const float* panel, const float* init, float* y, int64_t ldy) {
  switch (rows) {
    case 8: return panel_rows<N, 8>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 7: return panel_rows<N, 7>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 6: return panel_rows<N, 6>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 5: return panel_rows<N, 5>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 4: return panel_rows<N, 4>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 3: return panel_rows<N, 3>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 2: return panel_rows<N, 2>(x, sr, sk, kc, panel, init, 0, y, ldy);
    default: return panel_rows<N, 1>(x, sr, sk, kc, panel, init, 0, y, ldy);
  }
}

// A batch of products a_i [M, K] . b_i [K, N] (see batched_product in output_kernel.h): element (i, m, k) of a at
// a[i * as0 + m * as1 + k * as2], likewise b; y [Bt, M, N] contiguous.
struct BatchedArgs {
  const float* a;
  int64_t as0, as1, as2;
  const float* b;
  int64_t bs0, bs1, bs2;
  float* y;
  int64_t M, K, N;
};

// Products i0 .. i1 - 1: b_i packed into panels of kPanel columns ([P, K, kPanel], zero beyond N), then every
// kRows rows of a_i through each panel. Each output is one sum over k in order.
template <int N>
__attribute__((always_inline)) inline void batched_panels(const BatchedArgs& x, int64_t i0, int64_t i1) {
  constexpr int W = 2 * N;
  const int64_t M = x.M, K = x.K, Nc = x.N, P = (Nc + W - 1) / W;
  std::vector<float> panels(static_cast<size_t>(P * K * W));
  alignas(64) float part[kRows * W];
  alignas(64) const float zero[W] = {};
  for (int64_t i = i0; i < i1; ++i) {
    const float* b = x.b + i * x.bs0;
    if (x.bs2 == 1) {  // rows of b lie contiguous: each panel row is a piece of one
      for (int64_t p = 0; p < P; ++p) {
        const int64_t cols = std::min<int64_t>(W, Nc - p * W);
        for (int64_t k = 0; k < K; ++k) {
          float* dst = panels.data() + (p * K + k) * W;
          std::memcpy(dst, b + k * x.bs1 + p * W, sizeof(float) * static_cast<size_t>(cols));
          if (cols < W) std::memset(dst + cols, 0, sizeof(float) * static_cast<size_t>(W - cols));
        }
      }
    } else {  // a column of b at a time (its columns lie contiguous when b is a transposed view)
      if (Nc % W != 0) std::memset(panels.data() + (P - 1) * K * W, 0, sizeof(float) * static_cast<size_t>(K * W));
      for (int64_t n = 0; n < Nc; ++n) {
        float* dst = panels.data() + (n / W) * K * W + n % W;
        const float* src = b + n * x.bs2;
        for (int64_t k = 0; k < K; ++k) dst[k * W] = src[k * x.bs1];
      }
    }
    for (int64_t m = 0; m < M; m += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, M - m);
      const float* a = x.a + i * x.as0 + m * x.as1;
      float* y = x.y + (i * M + m) * Nc;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t cols = std::min<int64_t>(W, Nc - p * W);
        const float* panel = panels.data() + p * K * W;
        if (cols == W) {
          some_panel_rows<N>(rows, a, x.as1, x.as2, K, panel, zero, y + p * W, Nc);
          continue;
        }
        some_panel_rows<N>(rows, a, x.as1, x.as2, K, panel, zero, part, W);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * Nc + p * W, part + r * W, sizeof(float) * static_cast<size_t>(cols));
      }
    }
  }
}

// The label-smoothed cross-entropy's rows and gradient (see output_kernel.h).
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
  if (!logits.is_cpu() || logits.scalar_type() != torch::kFloat || !target.is_cpu() || target.scalar_type() != torch::kLong)
    return false;
  const auto t = target.accessor<int64_t, 1>();
  for (int64_t i = 0; i < target.size(0); ++i)
    TORCH_CHECK(t[i] >= 0 && t[i] < logits.size(1), "cross_entropy: target ", t[i], " out of range for ", logits.size(1), " classes");
  return true;
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx512f"))) void packed_panels_avx512(const PackedArgs& a, int64_t j0, int64_t j1) {
  packed_panels<kPanelLanes>(a, j0, j1);
}
__attribute__((target("avx512f"))) void batched_panels_avx512(const BatchedArgs& a, int64_t i0, int64_t i1) {
  batched_panels<kPanelLanes>(a, i0, i1);
}
#endif
}  // namespace

RowArgmax argmax_log_softmax(const torch::Tensor& logits, int max_lanes) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "argmax_log_softmax: logits must be [B, V] with V > 0, got ",
              logits.sizes());
  TORCH_CHECK(max_lanes == 4 || max_lanes == 8 || max_lanes == 16, "argmax_log_softmax: 4, 8 or 16 lanes, got ", max_lanes);
  RowArgmax out;
  if (!logits.is_cpu() || logits.scalar_type() != torch::kFloat) {
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
#ifdef ATTNMT_X86_LANES
    if (lanes == 16) return argmax_rows_avx512(X, V, b0, b1, ids, lp);
    if (lanes == 8) return argmax_rows_avx2(X, V, b0, b1, ids, lp);
#endif
    argmax_rows<4>(X, V, b0, b1, ids, lp);
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
#ifdef ATTNMT_X86_LANES
    if (lanes == 16) return cross_entropy_forward_avx512(a, r0, r1);
    if (lanes == 8) return cross_entropy_forward_avx2(a, r0, r1);
#endif
    cross_entropy_forward_rows<4>(a, r0, r1);
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
#ifdef ATTNMT_X86_LANES
    if (lanes == 16) return cross_entropy_backward_avx512(a, r0, r1);
    if (lanes == 8) return cross_entropy_backward_avx2(a, r0, r1);
#endif
    cross_entropy_backward_rows<4>(a, r0, r1);
  });
  return true;
}

bool PackedLinear::available() {
#ifdef ATTNMT_X86_LANES
  return cpu_lanes() == 16;
#else
  return false;
#endif
}

void PackedLinear::refresh(const torch::Tensor& weight, const torch::Tensor& bias) {
  const void* bias_impl = bias.defined() ? bias.unsafeGetTensorImpl() : nullptr;
  const int64_t bias_version = bias.defined() ? bias._version() : 0;
  if (panels_.defined() && weight.unsafeGetTensorImpl() == weight_impl_ && weight.data_ptr() == weight_data_ &&
      weight._version() == weight_version_ && bias_impl == bias_impl_ && bias_version == bias_version_)
    return;
  torch::NoGradGuard ng;
  const int64_t V = weight.size(0), K = weight.size(1), P = (V + kPanel - 1) / kPanel;
  if (weight.t().is_contiguous()) {
    // W^T [K, V] lies row by row (a transposed weight, or a gradient): a panel is a strip of its columns.
    torch::Tensor wt = weight.t();
    if (V % kPanel != 0) {
      torch::Tensor padded = torch::zeros({K, P * kPanel}, weight.options());
      padded.narrow(1, 0, V).copy_(wt);
      wt = padded;
    }
    panels_ = wt.view({K, P, kPanel}).permute({1, 0, 2}).contiguous();  // [P, K, kPanel]
  } else {
    torch::Tensor w = torch::zeros({P * kPanel, K}, weight.options());
    w.narrow(0, 0, V).copy_(weight);
    panels_ = w.view({P, kPanel, K}).transpose(1, 2).contiguous();  // [P, K, kPanel]
  }
  bias_ = torch::zeros({P * kPanel}, weight.options());
  if (bias.defined()) bias_.narrow(0, 0, V).copy_(bias);
  weight_impl_ = weight.unsafeGetTensorImpl();
  weight_data_ = weight.data_ptr();
  weight_version_ = weight._version();
  bias_impl_ = bias_impl;
  bias_version_ = bias_version;
}

torch::Tensor PackedLinear::operator()(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       int threads) {
  TORCH_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "PackedLinear: x ", x.sizes(),
              " does not fit weight ", weight.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "PackedLinear: bias ",
              bias.sizes(), " does not fit weight ", weight.sizes());
  const bool kernel = available() && x.is_cpu() && weight.is_cpu() && x.scalar_type() == torch::kFloat &&
                      weight.scalar_type() == torch::kFloat && (!bias.defined() || bias.scalar_type() == torch::kFloat) &&
                      !(torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad()));
  if (!kernel) return torch::nn::functional::linear(x, weight, bias);
#ifdef ATTNMT_X86_LANES
  refresh(weight, bias);
  const int64_t K = weight.size(1), V = weight.size(0);
  // Rows of a row-major matrix, or of a transposed one (a gradient's transpose: no copy).
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  torch::Tensor x2 = x.reshape({rows, K});
  if (!(x2.stride(1) == 1 && x2.stride(0) >= K) && !(x2.stride(0) == 1 && x2.stride(1) >= x2.size(0))) x2 = x2.contiguous();
  const int64_t B = x2.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = V;
  torch::Tensor y = torch::empty({B, V}, x2.options());
  if (B == 0 || V == 0) return y.view(out_shape);
  torch::Tensor tail = torch::zeros({kRows, K}, x2.options());
  const int64_t tail_rows = B % kRows;
  if (tail_rows > 0) tail.narrow(0, 0, tail_rows).copy_(x2.narrow(0, B - tail_rows, tail_rows));
  const PackedArgs a{x2.data_ptr<float>(), x2.stride(0), x2.stride(1), tail.data_ptr<float>(), panels_.data_ptr<float>(), bias_.data_ptr<float>(),
                     y.data_ptr<float>(), B, K, V};
  // The columns in as many contiguous shares as threads, the caller's thread taking the first.
  const int64_t P = panels_.size(0);
  const int64_t n = std::min<int64_t>(P, threads > 0 ? threads : blas_threads());
  run_shares(n, [&a, n, P](int64_t t) { packed_panels_avx512(a, P * t / n, P * (t + 1) / n); });
  return y.view(out_shape);
#else
  return torch::nn::functional::linear(x, weight, bias);
#endif
}

namespace {
std::atomic<int> g_product_kernel{static_cast<int>(ProductKernel::kAuto)};

bool blas_is_narrower_than_cpu() {
  if (!PackedLinear::available()) return false;
  const std::string core = blas_kernel();
  if (core.empty()) return false;  // not OpenBLAS: its own choice of kernel stands
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == wide) return false;
  return true;
}

// y = x W^T + b with the packed kernel for all three products. Without a bias, bias is an empty placeholder
// (LibTorch 1.13's apply needs defined tensors) and has_bias false.
struct PackedLinearFunction : public torch::autograd::Function<PackedLinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool has_bias) {
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    ctx->save_for_backward({x.reshape({rows, x.size(-1)}), weight});
    ctx->saved_data["bias"] = has_bias;
    ctx->saved_data["shape"] = x.sizes().vec();
    PackedLinear p;
    return p(x, weight, has_bias ? bias : torch::Tensor());
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &x2 = s[0], &weight = s[1];
    const torch::Tensor dy = grads[0].reshape({-1, weight.size(0)}).contiguous();  // [N, V]
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = product(dy, weight).view(ctx->saved_data["shape"].toIntVector());
    if (ctx->needs_input_grad(1)) dw = product(dy.t(), x2);  // [V, K], dy read column by column, not copied
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) db = dy.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }
};

bool float_cpu(const torch::Tensor& t) { return !t.defined() || (t.is_cpu() && t.scalar_type() == torch::kFloat); }

// a [Bt, M, K] . b [Bt, K, N] on the packed kernel (any strides), outside autograd; the products shared between threads.
torch::Tensor batched_panels_product(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (Bt > 0 && M == 1 && K > 0 && N > 0) {
    // One row per product (a decoder step's query when input feeding makes the decoder step in training, and that
    // step's gradient): packing b would cost about as much as the product, so the row kernels of
    // model/additive_kernel.h read it in place, as decoding's steps do.
    if (b.transpose(1, 2).is_contiguous()) return value_dots(b.transpose(1, 2), a.squeeze(1)).unsqueeze(1);
    return weighted_values(a.squeeze(1), b).unsqueeze(1);
  }
  if (K == 1) return a * b;  // [Bt, M, 1] * [Bt, 1, N]: the outer products of a one-query step's weight gradient
  torch::Tensor y = torch::empty({Bt, M, N}, a.options());
  if (Bt == 0 || M == 0 || N == 0) return y;
#ifdef ATTNMT_X86_LANES
  const BatchedArgs x{a.data_ptr<float>(), a.stride(0), a.stride(1), a.stride(2), b.data_ptr<float>(), b.stride(0),
                      b.stride(1), b.stride(2), y.data_ptr<float>(), M, K, N};
  share_rows(Bt, 1, [&x](int64_t i0, int64_t i1) { batched_panels_avx512(x, i0, i1); });
#endif
  return y;
}

// c = a . b with both gradients through the same kernel: da = g b^T; db = a^T g, or (g^T a)^T where b is narrower
// than it is deep (the keys' transpose of a score product), so that the kernel's output rows stay long.
struct BatchedProductFunction : public torch::autograd::Function<BatchedProductFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return batched_panels_product(a, b);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &a = s[0], &b = s[1], &g = grads[0];
    torch::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = batched_panels_product(g, b.transpose(1, 2));
    if (ctx->needs_input_grad(1))
      db = b.size(2) >= b.size(1) ? batched_panels_product(a.transpose(1, 2), g)
                                  : batched_panels_product(g.transpose(1, 2), a).transpose(1, 2);
    return {da, db};
  }
};
}  // namespace

void set_product_kernel(ProductKernel k) { g_product_kernel.store(static_cast<int>(k)); }

bool parse_product_kernel(const std::string& s, ProductKernel* k) {
  if (s == "auto") *k = ProductKernel::kAuto;
  else if (s == "packed") *k = ProductKernel::kPacked;
  else if (s == "blas") *k = ProductKernel::kBlas;
  else return false;
  return true;
}

bool packed_products() {
  switch (static_cast<ProductKernel>(g_product_kernel.load())) {
    case ProductKernel::kPacked: return PackedLinear::available();
    case ProductKernel::kBlas: return false;
    case ProductKernel::kAuto: break;
  }
  static const bool narrower = blas_is_narrower_than_cpu();
  return narrower;
}

std::string product_kernel_choice() {
  const auto k = static_cast<ProductKernel>(g_product_kernel.load());
  const std::string core = blas_kernel().empty() ? std::string("not OpenBLAS") : "OpenBLAS " + blas_kernel();
  if (k == ProductKernel::kBlas) return "BLAS (ATTNMT_PRODUCTS=blas; " + core + ")";
  if (k == ProductKernel::kPacked)
    return PackedLinear::available() ? "packed AVX-512 (ATTNMT_PRODUCTS=packed)" : "BLAS (ATTNMT_PRODUCTS=packed, but no AVX-512)";
  if (packed_products()) return "packed AVX-512 (the BLAS runs " + core + ", a narrower kernel than this CPU's)";
  if (!PackedLinear::available()) return "BLAS (" + core + "; no AVX-512 for the packed kernel)";
  return "BLAS (" + core + ")";
}

torch::Tensor train_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!packed_products() || !float_cpu(x) || !float_cpu(weight) || !float_cpu(bias) || weight.dim() != 2 || x.dim() < 1 ||
      x.size(-1) != weight.size(1))
    return torch::nn::functional::linear(x, weight, bias);
  return PackedLinearFunction::apply(x, weight, bias.defined() ? bias : torch::empty({0}, weight.options()), bias.defined());
}

torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "product: a [M, K] and b [K, N] expected, got ",
              a.sizes(), " and ", b.sizes());
  if (!packed_products() || !float_cpu(a) || !float_cpu(b) ||
      (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())))
    return torch::mm(a, b);
  PackedLinear p;
  return p(a, b.t(), torch::Tensor());
}

torch::Tensor batched_product(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "batched_product: a [B, M, K] and b [B, K, N] expected, got ", a.sizes(), " and ", b.sizes());
  if (!packed_products() || !float_cpu(a) || !float_cpu(b)) return torch::bmm(a, b);
  if (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) return BatchedProductFunction::apply(a, b);
  return batched_panels_product(a, b);
}

torch::Tensor decoding_linear(const torch::nn::Module& owner, torch::nn::Linear& layer, PackedLinear& packed,
                              const torch::Tensor& x) {
  if (!owner.is_training() && !torch::GradMode::is_enabled()) return packed(x, layer->weight, layer->bias);
  return train_linear(x, layer->weight, layer->bias);
}

}  // namespace attnmt
