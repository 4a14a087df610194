#include "model/output_kernel.h"

#include "model/lanes.h"

#include <cmath>
#include <cstring>
#include <limits>

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
    // Four accumulators: each lane adds a quarter of the terms (less rounding on 8,000-word rows).
    F acc[4] = {F{}, F{}, F{}, F{}};
    for (v = 0; v + 4 * N <= V; v += 4 * N)
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
    ids[b] = arg;
    logp[b] = -std::log(sum);
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
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
#ifdef ATTNMT_X86_LANES
    if (lanes == 16) return argmax_rows_avx512(X, V, b0, b1, ids, lp);
    if (lanes == 8) return argmax_rows_avx2(X, V, b0, b1, ids, lp);
#endif
    argmax_rows<4>(X, V, b0, b1, ids, lp);
  });
  return out;
}

}  // namespace attnmt
