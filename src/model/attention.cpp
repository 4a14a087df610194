#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace attnmt {

AttentionMemory AttentionMemory::index_select(const torch::Tensor& rows) const {
  AttentionMemory m;
  if (keys.defined()) m.keys = keys.index_select(0, rows);  // undefined for the attention-free model
  if (values.defined()) m.values = values.index_select(0, rows);
  m.mask = mask.index_select(0, rows);
  return m;
}

torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask) {
  // mask [B, S] -> broadcast over the query (and head) axes
  torch::Tensor m = mask;
  while (m.dim() < scores.dim()) m = m.unsqueeze(1);
  return torch::softmax(scores.masked_fill(m.logical_not(), -std::numeric_limits<float>::infinity()), -1);
}

AttentionOutput scaled_dot_product(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& mask) {
  TORCH_CHECK(q.dim() == k.dim() && k.dim() == v.dim(), "scaled_dot_product: q, k, v need the same rank");
  TORCH_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product: q and k dims differ: ", q.sizes(), " vs ", k.sizes());
  TORCH_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product: k and v lengths differ");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [..., T, S]
  torch::Tensor w = masked_softmax(scores, mask);
  return {torch::matmul(w, v), w, torch::Tensor()};
}

namespace {
// N floats at a time with GCC/Clang vector extensions: 4 lanes (SSE on x86-64, NEON on ARM, plain code
// elsewhere) everywhere; on x86-64 also 8 (AVX2) and 16 (AVX-512) lanes in functions compiled for those
// instruction sets, chosen at run time from what the CPU supports (a portable build cannot assume them).
#if defined(__GNUC__) && defined(__x86_64__)
#define ATTNMT_X86_LANES 1
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only ever live inside the functions built for them
#endif
template <int N>
struct Lanes {
  typedef float type __attribute__((vector_size(4 * N)));
};

// tanh as a rational function on [-7.9053, 7.9053] (beyond it tanh rounds to +-1 in float): a minimax fit of
// odd degree 13 over even degree 6; largest error 3.9e-7 against double tanh on a fine grid over [-12, 12].
template <int N>
__attribute__((always_inline)) inline typename Lanes<N>::type tanh_lanes(typename Lanes<N>::type x) {
  using F = typename Lanes<N>::type;
  const F hi = F{} + 7.90531110763549805f;
  x = x > hi ? hi : x;
  x = x < -hi ? -hi : x;
  const F x2 = x * x;
  F p = F{} - 2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  F q = F{} + 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}

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
int additive_lanes_now() {
#ifdef ATTNMT_X86_LANES
  static const int cpu = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx2") ? 8 : 4;
#else
  static const int cpu = 4;
#endif
  return std::min(cpu, max_lanes_cap.load());
}

void additive_forward_float(const AdditiveArgs& x, int64_t B) {
  const int lanes = additive_lanes_now();
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
#ifdef ATTNMT_X86_LANES
    if (lanes == 16) return additive_rows_avx512(x, b0, b1);
    if (lanes == 8) return additive_rows_avx2(x, b0, b1);
#endif
    additive_rows<4>(x, b0, b1);
  });
}

bool float_cpu(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
  for (const auto* t : {&a, &b, &c})
    if (!t->is_cpu() || t->scalar_type() != torch::kFloat) return false;
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
  if (!e.is_cpu() || !e.is_contiguous() || !g_keys.is_contiguous()) {  // other devices: the same math in composed ops
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
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
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

namespace {
struct AdditiveScores : public torch::autograd::Function<AdditiveScores> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& wq, const torch::Tensor& keys,
                               const torch::Tensor& v) {
    torch::Tensor e;
    torch::Tensor scores = additive_scores_forward(wq, keys, v, &e);
    ctx->save_for_backward({e, v});
    return scores;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &e = saved[0], &v = saved[1];
    torch::Tensor g_keys = torch::zeros({e.size(0), e.size(2), e.size(3)}, e.options()), g_v = torch::zeros_like(v);
    torch::Tensor g_wq = additive_scores_backward(e, v, grads[0], g_keys, g_v);
    return {g_wq, g_keys, g_v};
  }
};
void check_query(const torch::Tensor& query, const AttentionMemory& mem, int64_t dim, const char* who) {
  TORCH_CHECK(query.dim() == 3, who, ": query must be [B, T, Q], got ", query.sizes());
  TORCH_CHECK(query.size(0) == mem.mask.size(0), who, ": batch ", query.size(0), " vs memory ", mem.mask.size(0));
  TORCH_CHECK(query.size(2) == dim, who, ": query dim ", query.size(2), ", expected ", dim);
}
void check_states(const torch::Tensor& enc, const torch::Tensor& mask, int64_t dim, const char* who) {
  TORCH_CHECK(enc.dim() == 3 && enc.size(2) == dim, who, ": encoder states must be [B, S, ", dim, "], got ", enc.sizes());
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == enc.size(0) && mask.size(1) == enc.size(1), who,
              ": mask must be [B, S], got ", mask.sizes());
}
}  // namespace

torch::Tensor additive_scores(const torch::Tensor& wq, const torch::Tensor& keys, const torch::Tensor& v) {
  TORCH_CHECK(wq.dim() == 3 && keys.dim() == 3 && v.dim() == 1, "additive_scores: wq [B, T, A], keys [B, S, A], v [A] expected, got ",
              wq.sizes(), ", ", keys.sizes(), ", ", v.sizes());
  TORCH_CHECK(wq.size(0) == keys.size(0) && wq.size(2) == keys.size(2) && keys.size(2) == v.size(0),
              "additive_scores: dims disagree: ", wq.sizes(), ", ", keys.sizes(), ", ", v.sizes());
  if (!torch::GradMode::is_enabled() || !(wq.requires_grad() || keys.requires_grad() || v.requires_grad()))
    return additive_scores_forward(wq, keys, v, nullptr);  // decoding: no tanh values kept
  return AdditiveScores::apply(wq, keys, v);
}

AdditiveAttention::AdditiveAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim) : key_dim_(key_dim) {
  w_query = register_module("w_query", torch::nn::Linear(torch::nn::LinearOptions(query_dim, attn_dim).bias(false)));
  u_key = register_module("u_key", torch::nn::Linear(torch::nn::LinearOptions(key_dim, attn_dim).bias(true)));
  v = register_module("v", torch::nn::Linear(torch::nn::LinearOptions(attn_dim, 1).bias(false)));
}

AttentionMemory AdditiveAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "AdditiveAttention");
  return {u_key(enc), enc, mask};  // keys: U h_j  [B, S, A]
}

AttentionOutput AdditiveAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  check_query(query, mem, w_query->weight.size(1), "AdditiveAttention");
  torch::Tensor scores = additive_scores(w_query(query), mem.keys, v->weight.view({-1}));  // [B, T, S]
  torch::Tensor w = masked_softmax(scores, mem.mask);
  return {torch::bmm(w, mem.values), w, torch::Tensor()};                        // [B, T, H_enc]
}

MultiplicativeAttention::MultiplicativeAttention(int64_t query_dim, int64_t key_dim, bool general) : key_dim_(key_dim) {
  if (general) {
    w = register_module("w", torch::nn::Linear(torch::nn::LinearOptions(key_dim, query_dim).bias(false)));
  } else {
    TORCH_CHECK(query_dim == key_dim, "dot attention needs query dim == key dim, got ", query_dim, " and ", key_dim);
  }
}

AttentionMemory MultiplicativeAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "MultiplicativeAttention");
  return {w ? w(enc) : enc, enc, mask};  // keys: W h_j (general) or h_j (dot)  [B, S, Q]
}

AttentionOutput MultiplicativeAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  check_query(query, mem, mem.keys.size(2), "MultiplicativeAttention");
  torch::Tensor scores = torch::bmm(query, mem.keys.transpose(1, 2));  // [B, T, S]
  torch::Tensor wts = masked_softmax(scores, mem.mask);
  return {torch::bmm(wts, mem.values), wts, torch::Tensor()};
}

MultiHeadAttention::MultiHeadAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim, int64_t heads)
    : key_dim_(key_dim), attn_dim_(attn_dim), heads_(heads) {
  TORCH_CHECK(attn_dim % heads == 0, "attention dim ", attn_dim, " not divisible by ", heads, " heads");
  wq = register_module("wq", torch::nn::Linear(torch::nn::LinearOptions(query_dim, attn_dim).bias(false)));
  wk = register_module("wk", torch::nn::Linear(torch::nn::LinearOptions(key_dim, attn_dim).bias(false)));
  wv = register_module("wv", torch::nn::Linear(torch::nn::LinearOptions(key_dim, attn_dim).bias(false)));
  wo = register_module("wo", torch::nn::Linear(torch::nn::LinearOptions(attn_dim, key_dim).bias(false)));
}

AttentionMemory MultiHeadAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "MultiHeadAttention");
  const int64_t B = enc.size(0), S = enc.size(1), d = attn_dim_ / heads_;
  // [B, S, A] -> [B, h, S, d], then flattened to [B, S, A] storage order h-major for index_select on dim 0
  torch::Tensor k = wk(enc).view({B, S, heads_, d}).permute({0, 2, 1, 3}).contiguous();
  torch::Tensor v = wv(enc).view({B, S, heads_, d}).permute({0, 2, 1, 3}).contiguous();
  return {k, v, mask};  // keys/values [B, h, S, d]
}

AttentionOutput MultiHeadAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  TORCH_CHECK(query.dim() == 3 && query.size(0) == mem.mask.size(0), "MultiHeadAttention: query must be [B, T, Q], got ",
              query.sizes());
  const int64_t B = query.size(0), T = query.size(1), d = attn_dim_ / heads_;
  torch::Tensor q = wq(query).view({B, T, heads_, d}).permute({0, 2, 1, 3});  // [B, h, T, d]
  AttentionOutput o = scaled_dot_product(q, mem.keys, mem.values, mem.mask);  // ctx [B, h, T, d], w [B, h, T, S]
  torch::Tensor ctx = o.context.permute({0, 2, 1, 3}).reshape({B, T, attn_dim_});
  return {wo(ctx), o.weights.mean(1), o.weights};
}

std::shared_ptr<AttentionImpl> make_attention(const ModelConfig& cfg) {
  const auto& a = cfg.attention;
  const int64_t H = cfg.hidden_dim;  // decoder state size == encoder output size
  const int64_t A = effective_attention_dim(cfg);
  if (a.type == "none") return nullptr;
  if (a.type == "bahdanau") return std::make_shared<AdditiveAttention>(H, H, A);
  if (a.type == "luong") {
    std::string s = effective_score(a);
    if (s == "concat") return std::make_shared<AdditiveAttention>(H, H, A);
    return std::make_shared<MultiplicativeAttention>(H, H, s == "general");
  }
  if (a.type == "scaled_dot") return std::make_shared<MultiHeadAttention>(H, H, A, a.heads);
  TORCH_CHECK(false, "unknown attention type ", a.type);
}

}  // namespace attnmt
