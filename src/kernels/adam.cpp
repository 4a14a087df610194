#include "kernels/adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "kernels/share_threads.h"
#include "kernels/lanes.h"
#include "kernels/mode.h"

namespace attnmt {

namespace {
// The per-element update, in LibTorch's order of operations: m = m b1 + (1 - b1) g; v = v b2 + (1 - b2) g g;
// p = p - step (m / (sqrt(v) / sqrt(bc2) + eps)), with g = grad + wd p where weight decay is set.
struct AdamArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  float b1, one_minus_b1, b2, one_minus_b2, sqrt_bc2, eps, neg_step, wd;
};

template <bool kDecay>
__attribute__((always_inline)) inline float adam_element(const AdamArgs& a, float p, float g, float& m, float& v) {
  const float gi = kDecay ? g + a.wd * p : g;
  m = m * a.b1 + a.one_minus_b1 * gi;
  v = v * a.b2 + a.one_minus_b2 * gi * gi;
  return p + a.neg_step * (m / (std::sqrt(v) / a.sqrt_bc2 + a.eps));
}

// N lanes at a time, then the scalar tail. sqrt comes from the instruction set (vsqrtps): GCC does not vectorize
// std::sqrt, which may set errno.
template <int N, bool kDecay, class Sqrt>
__attribute__((always_inline)) inline void adam_lanes(const AdamArgs& a, int64_t i0, int64_t i1, Sqrt lane_sqrt) {
  using F = typename Lanes<N>::type;
  int64_t i = i0;
  for (; i + N <= i1; i += N) {
    F p, g, m, v;
    std::memcpy(&p, a.p + i, sizeof p);
    std::memcpy(&g, a.g + i, sizeof g);
    std::memcpy(&m, a.m + i, sizeof m);
    std::memcpy(&v, a.v + i, sizeof v);
    const F gi = kDecay ? g + a.wd * p : g;
    m = m * a.b1 + a.one_minus_b1 * gi;
    v = v * a.b2 + a.one_minus_b2 * gi * gi;
    p = p + a.neg_step * (m / (lane_sqrt(v) / a.sqrt_bc2 + a.eps));
    std::memcpy(a.p + i, &p, sizeof p);
    std::memcpy(a.m + i, &m, sizeof m);
    std::memcpy(a.v + i, &v, sizeof v);
  }
  for (; i < i1; ++i) a.p[i] = adam_element<kDecay>(a, a.p[i], a.g[i], a.m[i], a.v[i]);
}

void adam_span_plain(const AdamArgs& a, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    a.p[i] = a.wd != 0 ? adam_element<true>(a, a.p[i], a.g[i], a.m[i], a.v[i]) : adam_element<false>(a, a.p[i], a.g[i], a.m[i], a.v[i]);
}
#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void adam_span_avx2(const AdamArgs& a, int64_t i0, int64_t i1) {
  auto lane_sqrt = [](Lanes<8>::type x) __attribute__((target("avx2"))) { return Lanes<8>::type(_mm256_sqrt_ps(x)); };
  if (a.wd != 0) return adam_lanes<8, true>(a, i0, i1, lane_sqrt);
  adam_lanes<8, false>(a, i0, i1, lane_sqrt);
}
__attribute__((target("avx512f"))) void adam_span_avx512(const AdamArgs& a, int64_t i0, int64_t i1) {
  auto lane_sqrt = [](Lanes<16>::type x) __attribute__((target("avx512f"))) { return Lanes<16>::type(_mm512_maskz_sqrt_ps(0xFFFF, x)); };
  if (a.wd != 0) return adam_lanes<16, true>(a, i0, i1, lane_sqrt);
  adam_lanes<16, false>(a, i0, i1, lane_sqrt);
}
#endif

bool fits(const torch::Tensor& t) { return t.defined() && kernels_for(t) && t.is_contiguous() && !t.is_sparse(); }

// A parameter's Adam state, made as LibTorch's step would make it when there is none yet.
torch::optim::AdamParamState& adam_state(torch::optim::Adam& optim, const torch::Tensor& p) {
  const auto key = optimizer_state_key(optim.state(), p);
  auto it = optim.state().find(key);
  if (it == optim.state().end()) {
    auto st = std::make_unique<torch::optim::AdamParamState>();
    st->step(0);
    st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = optim.state().emplace(key, std::move(st)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
}

// One more step in a parameter's state, and the bias corrections 1 - beta^step of its moments.
struct BiasCorrections {
  double first, second;
};
BiasCorrections advance(torch::optim::AdamParamState& st, double beta1, double beta2) {
  st.step(st.step() + 1);
  const double step = static_cast<double>(st.step());
  return {1 - std::pow(beta1, step), 1 - std::pow(beta2, step)};
}

// Adam for the tensors the kernel does not take (a GPU's, and every tensor under --kernels reference): the operations
// of torch::optim::Adam::step in the same order, each applied to all of a group's parameters at once (ATen's
// _foreach_ operations: a handful of launches a step, where a loop over the parameters makes eight per parameter).
void adam_step_multi_tensor(torch::optim::Adam& optim) {
  torch::NoGradGuard no_grad;
  for (auto& group : optim.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq;
    std::vector<c10::Scalar> sqrt_bc2, neg_step;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& st = adam_state(optim, p);
      const auto [bc1, bc2] = advance(st, beta1, beta2);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avg.push_back(st.exp_avg());
      exp_avg_sq.push_back(st.exp_avg_sq());
      sqrt_bc2.emplace_back(std::sqrt(bc2));
      neg_step.emplace_back(-(o.lr() / bc1));
    }
    if (params.empty()) continue;
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    at::_foreach_mul_(exp_avg, beta1);
    at::_foreach_add_(exp_avg, grads, 1 - beta1);
    at::_foreach_mul_(exp_avg_sq, beta2);
    at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sq);
    at::_foreach_div_(denom, sqrt_bc2);
    at::_foreach_add_(denom, o.eps());
    at::_foreach_addcdiv_(params, exp_avg, denom, neg_step);
  }
}
}  // namespace

void adam_step(torch::optim::Adam& optim, int max_lanes) {
  for (const auto& group : optim.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.amsgrad()) return static_cast<void>(optim.step());
  }
  for (const auto& group : optim.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fits(p) || !fits(p.grad())) return adam_step_multi_tensor(optim);
      auto it = optim.state().find(optimizer_state_key(optim.state(), p));
      if (it != optim.state().end()) {
        const auto& st = static_cast<const torch::optim::AdamParamState&>(*it->second);
        if (!fits(st.exp_avg()) || !fits(st.exp_avg_sq())) return adam_step_multi_tensor(optim);
      }
    }
  }
  torch::NoGradGuard no_grad;
  const int lanes = std::min(cpu_lanes(), max_lanes);
  for (auto& group : optim.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& st = adam_state(optim, p);
      const auto [bc1, bc2] = advance(st, beta1, beta2);
      const AdamArgs a{p.data_ptr<float>(), p.grad().data_ptr<float>(), st.exp_avg().data_ptr<float>(),
                       st.exp_avg_sq().data_ptr<float>(), static_cast<float>(beta1), static_cast<float>(1 - beta1),
                       static_cast<float>(beta2), static_cast<float>(1 - beta2), static_cast<float>(std::sqrt(bc2)),
                       static_cast<float>(o.eps()), static_cast<float>(-(o.lr() / bc1)), static_cast<float>(o.weight_decay())};
      share_rows(p.numel(), 1 << 16, [&](int64_t i0, int64_t i1) {
        ATTNMT_LANES_CALL(lanes, adam_span, adam_span_plain, a, i0, i1);
      });
      // Written through raw pointers: bump the version counters as an in-place op would (packed copies of the
      // weights, kernels/packed_product.h, are refreshed by them).
      for (const torch::Tensor* t : {&p, &st.exp_avg(), &st.exp_avg_sq()}) t->unsafeGetTensorImpl()->bump_version();
    }
  }
}

}  // namespace attnmt
