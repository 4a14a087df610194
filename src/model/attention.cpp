#include "model/attention.h"

#include "kernels/mode.h"

#include <algorithm>

#include <cmath>
#include <torch/version.h>

namespace attnmt {

AttentionMemory AttentionMemory::index_select(const torch::Tensor& rows) const {
  AttentionMemory m;
  if (keys.defined()) m.keys = keys.index_select(0, rows);  // undefined for the attention-free model
  if (values.defined()) m.values = values.index_select(0, rows);
  m.mask = mask.index_select(0, rows);
  if (blocked.defined()) m.blocked = blocked.index_select(0, rows);
  for (const AttentionMemory& l : layers) m.layers.push_back(l.index_select(rows));
  return m;
}

namespace {
thread_local bool maps_wanted = true;
}  // namespace

bool attention_maps_wanted() { return maps_wanted; }
void set_attention_maps_wanted(bool wanted) { maps_wanted = wanted; }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
bool fused_attention_available() { return true; }
#else
bool fused_attention_available() { return false; }
#endif

bool AttentionImpl::fused_for(const torch::Tensor& query) const {
  return !maps_wanted && !observer_ && !edit_ && fused_attention_available() &&
         !kernels_on(query.device());
}

namespace {
// softmax(q k^T * factor) v as LibTorch's one operation; mask [B, S] or [B, T, S] (true: takes part), broadcast over the
// other axes of q, or undefined.
torch::Tensor fused_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask,
                            double factor) {
  torch::Tensor m = mask;
  if (m.defined())
    while (m.dim() < q.dim()) m = m.unsqueeze(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return at::scaled_dot_product_attention(q, k, v, m.defined() ? c10::optional<torch::Tensor>(m) : c10::nullopt, 0.0, false, factor);
#else
  (void)k, (void)v, (void)factor;
  TORCH_CHECK(false, "fused attention needs LibTorch 2.1 or later (fused_attention_available)");
#endif
}

// Softmax over the last axis with the blocked positions ([B, S], broadcast over the query and head axes) at exactly 0.
torch::Tensor blocked_softmax(const torch::Tensor& scores, const torch::Tensor& blocked) {
  torch::Tensor m = blocked;
  while (m.dim() < scores.dim()) m = m.unsqueeze(1);
  return torch::softmax(scores.masked_fill(m, -std::numeric_limits<float>::infinity()), -1);
}
}  // namespace

torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask) { return blocked_softmax(scores, mask.logical_not()); }

torch::Tensor masked_softmax(const torch::Tensor& scores, const AttentionMemory& mem) {
  if (mem.blocked.defined()) return blocked_softmax(scores, mem.blocked);
  return mem.mask.defined() ? masked_softmax(scores, mem.mask) : torch::softmax(scores, -1);
}

AttentionOutput scaled_dot_product(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& mask, bool scale, const torch::Tensor& blocked) {
  TORCH_CHECK(q.dim() == k.dim() && k.dim() == v.dim(), "scaled_dot_product: q, k, v need the same rank");
  TORCH_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product: q and k dims differ: ", q.sizes(), " vs ", k.sizes());
  TORCH_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product: k and v lengths differ");
  TORCH_CHECK(q.sizes().slice(0, q.dim() - 2) == k.sizes().slice(0, k.dim() - 2) &&
                  k.sizes().slice(0, k.dim() - 2) == v.sizes().slice(0, v.dim() - 2),
              "scaled_dot_product: q, k, v need the same leading axes, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const double factor = scale ? 1.0 / std::sqrt(static_cast<double>(q.size(-1))) : 1.0;
  // The leading axes (batch, heads) as one for the batched products: [N, T, d]
  auto flat = [](const torch::Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); };
  std::vector<int64_t> shape = q.sizes().vec();
  shape.back() = k.size(-2);
  torch::Tensor scores = batched_product(flat(q), flat(k).transpose(1, 2)).view(shape);  // [..., T, S]
  if (scale) scores = scores * factor;
  torch::Tensor w = blocked.defined() ? blocked_softmax(scores, blocked)
                    : mask.defined()  ? masked_softmax(scores, mask)
                                      : torch::softmax(scores, -1);
  shape.back() = v.size(-1);
  return {batched_product(flat(w), flat(v)).view(shape), w, torch::Tensor(), scores};
}

torch::Tensor AttentionImpl::join_heads(const torch::Tensor& contexts) {
  TORCH_CHECK(contexts.dim() == 4 && contexts.size(1) == 1, "attention: one head's context must be [B, 1, T, d], got ",
              contexts.sizes());
  return contexts.squeeze(1);
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
// One query per sentence and no gradient wanted (a decoder step while searching): the row kernels of
// kernels/additive_scores.h take the place of bmm's B tiny products.
bool one_query_without_grad(const torch::Tensor& query) { return query.size(1) == 1 && !torch::GradMode::is_enabled(); }
// sum_s w[b, t, s] values[b, s, :]  [B, T, C]
torch::Tensor context(const torch::Tensor& w, const torch::Tensor& values) {
  if (one_query_without_grad(w)) return weighted_values(w.squeeze(1), values).unsqueeze(1);
  return batched_product(w, values);
}
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
  if (!kernels_on(wq.device())) return torch::matmul(torch::tanh(wq.unsqueeze(2) + keys.unsqueeze(1)), v);  // the reference
  if (!torch::GradMode::is_enabled() || !(wq.requires_grad() || keys.requires_grad() || v.requires_grad()))
    return additive_scores_forward(wq, keys, v, nullptr);  // decoding: no tanh values kept
  return AdditiveScores::apply(wq, keys, v);
}

AdditiveAttention::AdditiveAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim) : key_dim_(key_dim) {
  w_query = register_module("w_query", Linear(without_bias(query_dim, attn_dim)));  // W
  u_key = register_module("u_key", Linear(key_dim, attn_dim));                      // U (with a bias)
  v = register_module("v", Linear(without_bias(attn_dim, 1)));                      // v
}

AttentionMemory AdditiveAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "AdditiveAttention");
  return {u_key(enc), enc, mask, {}, {}};  // keys: U h_j  [B, S, A]
}

AttentionOutput AdditiveAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  check_query(query, mem, w_query->weight.size(1), "AdditiveAttention");
  torch::Tensor scores = additive_scores(w_query(query), mem.keys, v_vector());  // v^T tanh(W s + U h_j)  [B, T, S]
  torch::Tensor w = edited(masked_softmax(scores, mem), mem.mask);
  return observed(query, mem, {context(w, mem.values), w, torch::Tensor(), scores});  // [B, T, H_enc]
}

MultiplicativeAttention::MultiplicativeAttention(int64_t query_dim, int64_t key_dim, bool general) : key_dim_(key_dim) {
  if (general) {
    w = register_module("w", Linear(without_bias(key_dim, query_dim)));
  } else {
    TORCH_CHECK(query_dim == key_dim, "dot attention needs query dim == key dim, got ", query_dim, " and ", key_dim);
  }
}

AttentionMemory MultiplicativeAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "MultiplicativeAttention");
  return {w ? w(enc) : enc, enc, mask, {}, {}};  // keys: W h_j (general) or h_j (dot)  [B, S, Q]
}

AttentionOutput MultiplicativeAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  check_query(query, mem, mem.keys.size(2), "MultiplicativeAttention");
  if (fused_for(query)) return {fused_context(query, mem.keys, mem.values, mem.mask, 1.0), {}, {}, {}};
  // [B, T, S]; one query per sentence while decoding: the row kernel instead of B tiny BLAS products
  torch::Tensor scores = one_query_without_grad(query) ? value_dots(mem.keys, query.squeeze(1)).unsqueeze(1)
                                                        : batched_product(query, mem.keys.transpose(1, 2));
  torch::Tensor wts = edited(masked_softmax(scores, mem), mem.mask);
  return observed(query, mem, {context(wts, mem.values), wts, torch::Tensor(), scores});
}

MultiHeadAttention::MultiHeadAttention(int64_t query_dim, int64_t key_dim, int64_t attn_dim, int64_t heads, bool scale)
    : key_dim_(key_dim), attn_dim_(attn_dim), heads_(heads), scale_(scale) {
  TORCH_CHECK(attn_dim % heads == 0, "attention dim ", attn_dim, " not divisible by ", heads, " heads");
  wq = register_module("wq", Linear(without_bias(query_dim, attn_dim)));
  wk = register_module("wk", Linear(without_bias(key_dim, attn_dim)));
  wv = register_module("wv", Linear(without_bias(key_dim, attn_dim)));
  wo = register_module("wo", Linear(without_bias(attn_dim, key_dim)));
}

AttentionMemory MultiHeadAttention::prepare(const torch::Tensor& enc, const torch::Tensor& mask) {
  check_states(enc, mask, key_dim_, "MultiHeadAttention");
  AttentionMemory m = keys_values(enc);
  m.mask = mask;
  return m;
}

AttentionMemory MultiHeadAttention::keys_values(const torch::Tensor& states) {
  TORCH_CHECK(states.dim() == 3 && states.size(2) == key_dim_, "MultiHeadAttention: states must be [B, S, ", key_dim_, "], got ",
              states.sizes());
  const int64_t B = states.size(0), S = states.size(1), d = attn_dim_ / heads_;
  // [B, S, A] -> [B, h, S, d], then flattened to [B, S, A] storage order h-major for index_select on dim 0
  torch::Tensor k = wk(states).view({B, S, heads_, d}).permute({0, 2, 1, 3}).contiguous();
  torch::Tensor v = wv(states).view({B, S, heads_, d}).permute({0, 2, 1, 3}).contiguous();
  return {k, v, {}, {}, {}};  // keys/values [B, h, S, d]
}

AttentionOutput MultiHeadAttention::attend(const torch::Tensor& query, const AttentionMemory& mem) {
  TORCH_CHECK(query.dim() == 3 && query.size(0) == mem.keys.size(0), "MultiHeadAttention: query must be [B, T, Q] with B ",
              mem.keys.size(0), ", got ", query.sizes());
  const int64_t B = query.size(0), T = query.size(1), d = attn_dim_ / heads_;
  torch::Tensor q = wq(query).view({B, T, heads_, d}).permute({0, 2, 1, 3});  // [B, h, T, d]
  if (fused_for(query)) {  // the same computation without the weights
    const double factor = scale_ ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
    torch::Tensor ctx = fused_context(q, mem.keys, mem.values, mem.mask, factor).permute({0, 2, 1, 3}).reshape({B, T, attn_dim_});
    return {wo(ctx), {}, {}, {}};
  }
  AttentionOutput o = scaled_dot_product(q, mem.keys, mem.values, mem.mask, scale_, mem.blocked);  // ctx [B, h, T, d], w [B, h, T, S]
  TORCH_CHECK(!editing(), "MultiHeadAttention: weight edits apply to bahdanau and luong only");
  torch::Tensor mean = attention_maps_wanted() ? o.weights.mean(1) : torch::Tensor();  // the map: mean of the heads
  return observed(query, mem, {join_heads(o.context), mean, o.weights, o.scores});
}

double MultiHeadAttention::score_scale() const {
  return scale_ ? 1.0 / std::sqrt(static_cast<double>(attn_dim_ / heads_)) : 1.0;
}

torch::Tensor MultiHeadAttention::join_heads(const torch::Tensor& contexts) {
  TORCH_CHECK(contexts.dim() == 4 && contexts.size(1) == heads_, "MultiHeadAttention: contexts must be [B, ", heads_,
              ", T, d], got ", contexts.sizes());
  const int64_t B = contexts.size(0), T = contexts.size(2);
  return wo(contexts.permute({0, 2, 1, 3}).reshape({B, T, attn_dim_}));
}

std::shared_ptr<AttentionImpl> make_attention(const ModelConfig& cfg) {
  const auto& a = cfg.attention;
  const int64_t H = cfg.hidden_dim;  // decoder state size == encoder output size
  const int64_t A = effective_attention_dim(cfg);
  switch (a.type) {
    case AttentionType::kNone: return nullptr;
    case AttentionType::kBahdanau: return std::make_shared<AdditiveAttention>(H, H, A);
    case AttentionType::kLuong: {
      const LuongScore s = effective_score(a);
      if (s == LuongScore::kConcat) return std::make_shared<AdditiveAttention>(H, H, A);
      return std::make_shared<MultiplicativeAttention>(H, H, s == LuongScore::kGeneral);
    }
    case AttentionType::kScaledDot: return std::make_shared<MultiHeadAttention>(H, H, A, a.heads, a.scale);
  }
  TORCH_CHECK(false, "unknown attention type ", static_cast<int>(a.type));
}

AttentionTraits attention_traits(const AttentionConfig& a) {
  AttentionTraits t;
  t.attends = a.type != AttentionType::kNone;
  t.after_rnn = a.type == AttentionType::kLuong || a.type == AttentionType::kScaledDot;
  t.label = t.summary = to_string(a.type);
  if (a.type == AttentionType::kLuong) {
    t.label += "-" + to_string(effective_score(a));
    t.summary += "/" + to_string(effective_score(a));
  }
  if (a.type == AttentionType::kScaledDot) t.summary += "/" + std::to_string(a.heads) + (a.heads == 1 ? " head" : " heads");
  const LuongScore score = effective_score(a);
  if (a.type == AttentionType::kBahdanau || (a.type == AttentionType::kLuong && score == LuongScore::kConcat)) {
    t.score_formula = "score(q, k_j) = v . tanh(W q + U k_j)";
    t.scale_reason = "no scaling: tanh bounds every term, and the learned v sets the scores' range";
  } else if (a.type == AttentionType::kLuong && score == LuongScore::kDot) {
    t.score_formula = "score(q, k_j) = q . k_j";
    t.scale_reason = "no scaling in Luong's dot score (the decoder state and the keys have the same size)";
  } else if (a.type == AttentionType::kLuong) {
    t.score_formula = "score(q, k_j) = q . W k_j";
    t.scale_reason = "no scaling in Luong's general score (W is learned, and sets the range)";
  } else if (a.type == AttentionType::kScaledDot) {
    t.score_formula = "score(q, k_j) = (W_q q) . (W_k k_j) per head, scaled by 1/sqrt(d)";
    t.scale_reason = a.scale ? "scaled by 1/sqrt(d): a dot product of d terms grows like sqrt(d); unscaled, large scores "
                               "would make the softmax nearly one-hot, where its gradients vanish"
                             : "not scaled (model.attention.scale is false)";
  } else {
    t.score_formula = "no scores: one fixed context vector, the encoder's summary of the whole source";
    t.scale_reason = "nothing to weigh";
  }
  return t;
}

AttentionMacs attention_macs(const AttentionConfig& a, double H, double A, double S) {
  const LuongScore score = effective_score(a);
  if (a.type == AttentionType::kBahdanau || score == LuongScore::kConcat)
    return {H * A, H * A + S * A + S * H};  // U h_j; W q, v^T over S positions, weighted sum of values
  if (a.type == AttentionType::kLuong)
    return {score == LuongScore::kGeneral ? H * H : 0.0, S * H + S * H};  // W h_j; scores, context
  if (a.type == AttentionType::kScaledDot)
    return {2 * H * A, H * A + S * A + S * A + A * H};  // K and V; Q, scores, context, output projection
  return {};
}

}  // namespace attnmt
