#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "common/config.h"
#include "common/runtime.h"
#include "data/vocab.h"
#include "model/attention.h"
#include "kernels/gru_gates.h"
#include "kernels/gru_recurrence.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "kernels/softmax_rows.h"
#include "kernels/additive_scores.h"
#include "model/seq2seq.h"

using namespace attnmt;

namespace {

ModelConfig tiny_model(const std::string& type, const std::string& score = "", int heads = 1, bool feeding = false,
                       const std::string& rnn = "gru") {
  ModelConfig m;
  m.rnn = attnmt::rnn_cell_from_string(rnn);
  m.embed_dim = 8;
  m.hidden_dim = 12;
  m.dropout = 0.0;
  m.attention.type = attnmt::attention_type_from_string(type);
  m.attention.score = score.empty() ? attnmt::LuongScore::kDefault : attnmt::luong_score_from_string(score);
  m.attention.heads = heads;
  m.input_feeding = feeding;
  return m;
}

// m with self-attention stacks on the sides that say so (two layers, 2 and 3 heads).
ModelConfig with_stacks(ModelConfig m, LayerType enc, LayerType dec) {
  m.encoder.type = enc;
  m.decoder.type = dec;
  if (enc == LayerType::kSelfAttention) m.encoder_layers = 2, m.encoder.heads = 2;
  if (dec == LayerType::kSelfAttention) m.decoder_layers = 2, m.decoder.heads = 3;
  return m;
}

// Every attention configuration the project offers, and the self-attention encoder and decoder with each other and
// with the RNN ones.
std::vector<ModelConfig> all_models() {
  return {tiny_model("none"),          tiny_model("bahdanau"),          tiny_model("luong", "dot"),
          tiny_model("luong", "general"), tiny_model("luong", "concat"), tiny_model("luong", "general", 1, true),
          tiny_model("scaled_dot", "", 1), tiny_model("scaled_dot", "", 3), tiny_model("bahdanau", "", 1, false, "lstm"),
          with_stacks(tiny_model("scaled_dot", "", 2), LayerType::kSelfAttention, LayerType::kSelfAttention),
          with_stacks(tiny_model("bahdanau"), LayerType::kSelfAttention, LayerType::kRnn),
          with_stacks(tiny_model("scaled_dot", "", 3), LayerType::kRnn, LayerType::kSelfAttention)};
}

std::string name_of(const ModelConfig& m) {
  return to_string(m.rnn) + "/" + to_string(m.attention.type) + "/" + to_string(m.attention.score) + "/h" + std::to_string(m.attention.heads) +
         (m.input_feeding ? "/feed" : "") + (m.encoder.type == LayerType::kSelfAttention ? "/sa-enc" : "") +
         (m.decoder.type == LayerType::kSelfAttention ? "/sa-dec" : "");
}

struct TinyBatch {
  torch::Tensor src, len, mask, tgt_in, tgt_out;
};

// Three sentences of lengths 5, 3, 4 over a vocabulary of 20.
TinyBatch tiny_batch(int64_t extra_pad = 0) {
  torch::manual_seed(3);
  std::vector<int64_t> lens = {5, 3, 4};
  int64_t S = 5 + extra_pad;
  auto src = torch::full({3, S}, Vocab::kPad, torch::kLong);
  for (int b = 0; b < 3; ++b) src[b].slice(0, 0, lens[b]) = torch::randint(4, 20, {lens[b]}, torch::kLong);
  auto tgt = torch::randint(4, 20, {3, 4}, torch::kLong);
  TinyBatch t;
  t.src = src;
  t.len = torch::tensor(lens, torch::kLong);
  t.mask = src.ne(Vocab::kPad);
  t.tgt_in = torch::cat({torch::full({3, 1}, Vocab::kBos, torch::kLong), tgt.slice(1, 0, 3)}, 1);
  t.tgt_out = tgt;
  return t;
}

}  // namespace

TEST(Attention, WorkedExampleScaledDotProduct) {
  // q=[1,0,1,0]; k1=[1,0,1,0], k2=[0,1,0,1], k3=[1,0,0,0]; d_k=4: scores q.k/2 = [1, 0, 0.5]
  auto q = torch::tensor({1.f, 0.f, 1.f, 0.f}).view({1, 1, 4});
  auto k = torch::tensor({1.f, 0.f, 1.f, 0.f, 0.f, 1.f, 0.f, 1.f, 1.f, 0.f, 0.f, 0.f}).view({1, 3, 4});
  auto v = torch::tensor({10.f, 20.f, 30.f}).view({1, 3, 1});
  auto mask = torch::ones({1, 3}, torch::kBool);
  AttentionOutput o = scaled_dot_product(q, k, v, mask);
  ASSERT_EQ(o.weights.sizes(), (std::vector<int64_t>{1, 1, 3}));
  // softmax([1, 0, 0.5]) = e^1, e^0, e^0.5 over their sum 4.367...
  EXPECT_NEAR(o.weights[0][0][0].item<float>(), 0.5065, 1e-4);
  EXPECT_NEAR(o.weights[0][0][1].item<float>(), 0.1863, 1e-4);
  EXPECT_NEAR(o.weights[0][0][2].item<float>(), 0.3072, 1e-4);
  EXPECT_NEAR(o.context.item<float>(), 18.007, 1e-3);
  // Masking k3 renormalises over the first two: softmax([1, 0]) = [0.7311, 0.2689]
  auto m2 = torch::tensor({true, true, false}).view({1, 3});
  AttentionOutput o2 = scaled_dot_product(q, k, v, m2);
  EXPECT_EQ(o2.weights[0][0][2].item<float>(), 0.0f);
  EXPECT_NEAR(o2.weights[0][0][0].item<float>(), 0.7311, 1e-4);
}

TEST(Attention, WeightsSumToOneAndMaskedAreExactlyZero) {
  for (const ModelConfig& m : all_models()) {
    auto att = make_attention(m);
    if (!att) continue;
    torch::manual_seed(1);
    auto enc = torch::randn({2, 5, 12});
    auto mask = torch::tensor({true, true, true, false, false, true, true, true, true, true}).view({2, 5});
    auto query = torch::randn({2, 3, 12});
    AttentionMemory mem = att->prepare(enc, mask);
    AttentionOutput o = att->attend(query, mem);
    ASSERT_EQ(o.context.sizes(), (std::vector<int64_t>{2, 3, 12})) << name_of(m);
    ASSERT_EQ(o.weights.sizes(), (std::vector<int64_t>{2, 3, 5})) << name_of(m);
    EXPECT_TRUE(torch::allclose(o.weights.sum(-1), torch::ones({2, 3}), 1e-5, 1e-5)) << name_of(m);
    EXPECT_EQ(o.weights[0].slice(1, 3, 5).abs().sum().item<float>(), 0.0f) << name_of(m);
    if (m.attention.heads > 1) {
      ASSERT_EQ(o.head_weights.sizes(), (std::vector<int64_t>{2, m.attention.heads, 3, 5})) << name_of(m);
      EXPECT_EQ(o.head_weights[0].slice(2, 3, 5).abs().sum().item<float>(), 0.0f);
    }
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  for (const ModelConfig& m : all_models()) {
    auto att = make_attention(m);
    if (!att) continue;
    att->to(torch::kDouble);
    torch::manual_seed(2);
    auto enc = torch::randn({2, 4, 12}, torch::kDouble).requires_grad_(true);
    auto query = torch::randn({2, 2, 12}, torch::kDouble).requires_grad_(true);
    auto mask = torch::tensor({true, true, true, false, true, true, true, true}).view({2, 4});
    auto r1 = torch::randn({2, 2, 12}, torch::kDouble), r2 = torch::randn({2, 2, 4}, torch::kDouble);
    auto f = [&]() {
      AttentionOutput o = att->attend(query, att->prepare(enc, mask));
      return (o.context * r1).sum() + (o.weights * r2).sum();
    };
    auto loss = f();
    auto grads = torch::autograd::grad({loss}, {query, enc});
    const double eps = 1e-6;
    for (int which = 0; which < 2; ++which) {
      torch::Tensor x = which == 0 ? query : enc;
      auto flat = x.data().view(-1);
      auto g = grads[static_cast<size_t>(which)].reshape(-1);
      ASSERT_EQ(g.numel(), flat.numel());
      for (int64_t i = 0; i < flat.numel(); i += 3) {
        double orig = flat[i].item<double>();
        flat[i] = orig + eps;
        double up = f().item<double>();
        flat[i] = orig - eps;
        double down = f().item<double>();
        flat[i] = orig;
        double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(g[i].item<double>(), numeric, 1e-5 * std::max(1.0, std::abs(numeric))) << name_of(m) << " input " << which << " elem " << i;
      }
    }
  }
}

TEST(Attention, FusedAdditiveScoresMatchComposedOps) {
  // The one-node additive score (hand-written backward) against the same math in stock ops, values and all
  // three gradients, for one query (decoder step) and several (whole-sequence concat), with zero upstream
  // gradients where the mask would put them.
  for (int64_t T : {1, 3}) {
    torch::manual_seed(static_cast<uint64_t>(7 + T));
    auto wq = torch::randn({2, T, 6}, torch::kDouble).requires_grad_(true);
    auto keys = torch::randn({2, 5, 6}, torch::kDouble).requires_grad_(true);
    auto v = torch::randn({6}, torch::kDouble).requires_grad_(true);
    auto up = torch::randn({2, T, 5}, torch::kDouble);
    up.select(2, 4).zero_();
    torch::Tensor fused = additive_scores(wq, keys, v);
    torch::Tensor stock = torch::matmul(torch::tanh(wq.unsqueeze(2) + keys.unsqueeze(1)), v);
    ASSERT_EQ(fused.sizes(), stock.sizes());
    EXPECT_TRUE(torch::allclose(fused, stock, 1e-12, 1e-12));
    {
      torch::NoGradGuard ng;  // decoding takes the path that keeps no tanh values
      torch::Tensor plain = additive_scores(wq, keys, v);
      ASSERT_EQ(plain.sizes(), stock.sizes());
      EXPECT_TRUE(torch::allclose(plain, stock, 1e-12, 1e-12));
      torch::Tensor plain_f = additive_scores(wq.to(torch::kFloat), keys.to(torch::kFloat), v.to(torch::kFloat));
      EXPECT_TRUE(torch::allclose(plain_f.to(torch::kDouble), stock, 1e-5, 1e-5));
    }
    auto gf = torch::autograd::grad({(fused * up).sum()}, {wq, keys, v});
    auto gs = torch::autograd::grad({(stock * up).sum()}, {wq, keys, v});
    ASSERT_EQ(gf.size(), 3u);
    ASSERT_EQ(gs.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(gf[i].sizes(), gs[i].sizes()) << "T " << T << " input " << i;
      EXPECT_GT(gs[i].abs().max().item<double>(), 1e-3) << "T " << T << " input " << i;  // not vacuous
      EXPECT_TRUE(torch::allclose(gf[i], gs[i], 1e-10, 1e-12)) << "T " << T << " input " << i << "\n" << gf[i] - gs[i];
    }
  }
}

TEST(Attention, FusedAdditiveScoresInFloat) {
  // Float CPU tensors take the one-pass kernel (rational tanh, 4/8/16 lanes as the CPU allows, scalar tail):
  // values and gradients against the composed ops in double, for every lane count this CPU can run.
  std::set<int> ran;
  for (int cap : {4, 8, 16}) {
    const int lanes = set_additive_lanes(cap);
    if (!ran.insert(lanes).second) continue;
    torch::manual_seed(11);
    const int64_t A = 37;  // 16-lane: 2 vectors and a tail of 5; 8-lane: 4 and 5; 4-lane: 9 and 1
    auto wq = torch::randn({3, 2, A}), keys = torch::randn({3, 5, A}), v = torch::randn({A});
    auto up = torch::randn({3, 2, 5});
    auto f = [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      auto x = a.clone().requires_grad_(true), y = b.clone().requires_grad_(true), z = c.clone().requires_grad_(true);
      auto out = additive_scores(x, y, z);
      auto g = torch::autograd::grad({(out * up.to(out.scalar_type())).sum()}, {x, y, z});
      return std::make_pair(out.detach(), g);
    };
    auto [fused, gf] = f(wq, keys, v);
    auto stock = torch::matmul(torch::tanh(wq.to(torch::kDouble).unsqueeze(2) + keys.to(torch::kDouble).unsqueeze(1)), v.to(torch::kDouble));
    ASSERT_EQ(fused.scalar_type(), torch::kFloat);
    ASSERT_EQ(fused.sizes(), stock.sizes());
    EXPECT_LT((fused.to(torch::kDouble) - stock).abs().max().item<double>(), 1e-5) << lanes << " lanes";
    auto [ref, gr] = f(wq.to(torch::kDouble), keys.to(torch::kDouble), v.to(torch::kDouble));
    ASSERT_EQ(gf.size(), 3u);
    ASSERT_EQ(gr.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(gf[i].sizes(), gr[i].sizes());
      EXPECT_LT((gf[i].to(torch::kDouble) - gr[i]).abs().max().item<double>(), 1e-4) << lanes << " lanes, input " << i;
    }
    // The backward from the inputs (tanh recomputed, as the fused recurrence runs it) gives the same gradients,
    // with a masked position (zero upstream gradient) skipped.
    {
      auto up0 = up.clone();
      up0[1][0][3] = 0.0f;
      auto gk = torch::zeros_like(keys), gv = torch::zeros_like(v);
      auto gq = additive_scores_backward_from_inputs(wq, keys, v, up0, gk, gv);
      auto x = wq.to(torch::kDouble).requires_grad_(true), y = keys.to(torch::kDouble).requires_grad_(true),
           z = v.to(torch::kDouble).requires_grad_(true);
      auto g0 = torch::autograd::grad({(additive_scores(x, y, z) * up0.to(torch::kDouble)).sum()}, {x, y, z});
      ASSERT_EQ(gq.sizes(), g0[0].sizes());
      EXPECT_LT((gq.to(torch::kDouble) - g0[0]).abs().max().item<double>(), 1e-4) << lanes << " lanes (from inputs), query";
      EXPECT_LT((gk.to(torch::kDouble) - g0[1]).abs().max().item<double>(), 1e-4) << lanes << " lanes (from inputs), keys";
      EXPECT_LT((gv.to(torch::kDouble) - g0[2]).abs().max().item<double>(), 1e-4) << lanes << " lanes (from inputs), v";
    }
    // The tanh itself, through the scores: v = e_0, keys 0, so score = tanh(x) for x over [-12, 12], computed
    // in the vector lanes (A = 16) and in the scalar tail (A = 3).
    torch::NoGradGuard ng;
    auto x = torch::linspace(-12, 12, 4001);
    for (int64_t dim : {16, 3}) {
      auto q = torch::zeros({1, 4001, dim});
      q.select(2, 0).copy_(x.unsqueeze(0));
      auto e0 = torch::zeros({dim});
      e0[0] = 1.0f;
      auto scores = additive_scores(q, torch::zeros({1, 1, dim}), e0).view(-1);
      ASSERT_EQ(scores.numel(), 4001);
      EXPECT_LT((scores.to(torch::kDouble) - torch::tanh(x.to(torch::kDouble))).abs().max().item<double>(), 1e-6)
          << lanes << " lanes, A = " << dim;
    }
  }
  set_additive_lanes(16);
  EXPECT_TRUE(ran.count(4));
  std::printf("[ lanes    ] additive kernel checked with %zu lane count(s), widest %d\n", ran.size(), *ran.rbegin());
}

// The context and its backward for one query per sentence (the fused recurrence's per-step products, and
// decoding's): weighted_values and value_dots equal bmm in double to float rounding, for every lane count this
// CPU can run, widths around the lane counts, and enough sentences to be shared between threads; other dtypes
// go through bmm itself.
TEST(Attention, ValueRowKernelsEqualBmm) {
  int checked = 0;
  for (int cap : {4, 8, 16}) {
    const int lanes = set_additive_lanes(cap);
    for (int64_t C : {1, 7, 16, 17, 33, 512}) {
      torch::manual_seed(static_cast<uint64_t>(C));
      const int64_t B = 40, S = 9;
      const auto a = torch::softmax(torch::randn({B, S}), 1), v = torch::randn({B, S, C}), d = torch::randn({B, C});
      const auto ctx = weighted_values(a, v), dots = value_dots(v, d);
      const auto ref_ctx = torch::bmm(a.to(torch::kDouble).unsqueeze(1), v.to(torch::kDouble)).squeeze(1);
      const auto ref_dots = torch::bmm(v.to(torch::kDouble), d.to(torch::kDouble).unsqueeze(2)).squeeze(2);
      ASSERT_EQ(ctx.sizes(), ref_ctx.sizes());
      ASSERT_EQ(dots.sizes(), ref_dots.sizes());
      EXPECT_LT((ctx.to(torch::kDouble) - ref_ctx).abs().max().item<double>(), 1e-5) << "C " << C << " lanes " << lanes;
      EXPECT_LT((dots.to(torch::kDouble) - ref_dots).abs().max().item<double>(), 1e-5 * std::sqrt(static_cast<double>(C)))
          << "C " << C << " lanes " << lanes;
      ++checked;
    }
  }
  set_additive_lanes(16);
  EXPECT_EQ(checked, 18);
  const auto a = torch::rand({3, 4}, torch::kDouble), v = torch::randn({3, 4, 5}, torch::kDouble);
  EXPECT_TRUE(torch::equal(weighted_values(a, v), torch::bmm(a.unsqueeze(1), v).squeeze(1)));
  EXPECT_THROW(value_dots(v, torch::randn({3, 4}, torch::kDouble)), c10::Error);
}

TEST(OutputKernel, ArgmaxAndLogProbabilityEqualLogSoftmaxThenMax) {
  // Greedy search's pick: the index and log-probability that log_softmax(x).max(-1) gives (computed in
  // double), for every lane count this CPU can run, row lengths around the lane widths and the benchmark's
  // 8,000, wide and narrow logit spreads (exponents below -87 clamp), and ties (the first index wins).
  std::set<int> ran;
  for (int cap : {4, 8, 16}) {
    for (int64_t V : {1, 3, 15, 16, 17, 33, 8000, 8003}) {
      for (double spread : {1.0, 10.0, 300.0}) {
        torch::manual_seed(static_cast<uint64_t>(V));
        auto x = torch::randn({6, V}) * spread;
        if (V >= 3) x[5].fill_(0.5f), x[5][V - 2] = 2.0f, x[5][V - 1] = 2.0f;  // a tie between the last two
        const RowArgmax k = argmax_log_softmax(x, cap);
        auto [ref_lp, ref_id] = torch::log_softmax(x.to(torch::kDouble), -1).max(-1);
        ASSERT_EQ(k.ids.sizes(), ref_id.sizes());
        ASSERT_EQ(k.logp.sizes(), ref_lp.sizes());
        const int64_t rows = V >= 3 ? 5 : 6;  // the tie row is checked below (ATen does not promise which index)
        EXPECT_TRUE(torch::equal(k.ids.slice(0, 0, rows), ref_id.slice(0, 0, rows))) << "V " << V << " spread " << spread;
        // No less exact than ATen's float log_softmax (twice its error against double, at least 1e-5).
        auto [aten_lp, aten_id] = torch::log_softmax(x, -1).max(-1);
        const double aten_err = (aten_lp.to(torch::kDouble) - ref_lp).abs().max().item<double>();
        EXPECT_LT((k.logp.to(torch::kDouble) - ref_lp).abs().max().item<double>(), std::max(1e-5, 2 * aten_err))
            << "V " << V << " spread " << spread << " lanes " << cap;
        if (V >= 3) EXPECT_EQ(k.ids[5].item<int64_t>(), V - 2) << "ties go to the first index";
      }
    }
    ran.insert(cap);
  }
  // Other dtypes take ATen's ops; a wrong shape is refused.
  auto d = torch::randn({2, 9}, torch::kDouble);
  auto [ref_lp, ref_id] = torch::log_softmax(d, -1).max(-1);
  const RowArgmax k = argmax_log_softmax(d);
  EXPECT_TRUE(torch::equal(k.ids, ref_id));
  EXPECT_TRUE(torch::allclose(k.logp, ref_lp));
  EXPECT_THROW(argmax_log_softmax(torch::randn({2, 3, 4})), c10::Error);
  EXPECT_EQ(ran.size(), 3u);
}

TEST(OutputKernel, CrossEntropyRowsAndGradientEqualDoublePrecision) {
  // The training loss's row kernels against the same formulas in double: per-row loss and log-sum-exp, and the
  // gradient scale_i (softmax - eps / V - (1 - eps) onehot), for every lane count this CPU can run, row lengths
  // around the lane widths and the benchmark's 8,000, label smoothing on and off, and enough rows (200) to be
  // shared between threads. Rows that are not valid give 0 and no gradient; a NaN or infinite logit gives a
  // non-finite loss, as ATen's would; double logits are left to ATen (false).
  int checked = 0;
  for (int cap : {4, 8, 16}) {
    for (int64_t V : {1, 15, 16, 17, 64, 65, 8000}) {
      for (double eps : {0.0, 0.1}) {
        const int64_t n = 200;
        torch::manual_seed(static_cast<uint64_t>(V * 10 + cap));
        const auto x = torch::randn({n, V}) * 4;
        const auto t = torch::randint(0, V, {n}, torch::kLong);
        auto valid = torch::ones({n}, torch::kBool);
        valid[3] = false;
        valid[150] = false;
        CrossEntropyRows rows;
        ASSERT_TRUE(cross_entropy_rows(x, t, valid, eps, &rows, cap));
        const auto xd = x.to(torch::kDouble);
        const auto lse = xd.logsumexp(1);
        const auto ref = ((1 - eps) * (lse - xd.gather(1, t.unsqueeze(1)).squeeze(1)) + eps * (lse - xd.mean(1))) *
                         valid.to(torch::kDouble);
        ASSERT_EQ(rows.loss.sizes(), ref.sizes());
        ASSERT_EQ(rows.lse.sizes(), lse.sizes());
        EXPECT_LT((rows.loss.to(torch::kDouble) - ref).abs().max().item<double>(), 2e-5 * std::max(1.0, ref.abs().max().item<double>()))
            << "V " << V << " eps " << eps << " lanes " << cap;
        EXPECT_LT(((rows.lse.to(torch::kDouble) - lse) * valid.to(torch::kDouble)).abs().max().item<double>(), 2e-5);
        EXPECT_EQ(rows.loss[3].item<float>(), 0.0f);
        const auto scale = torch::rand({n}) * valid.to(torch::kFloat);
        torch::Tensor grad;
        ASSERT_TRUE(cross_entropy_grad(x, t, rows.lse, scale, eps, &grad, cap));
        const auto ref_grad = ((xd - lse.unsqueeze(1)).exp() - eps / static_cast<double>(V) -
                               (1 - eps) * torch::one_hot(t, V).to(torch::kDouble)) *
                              scale.to(torch::kDouble).unsqueeze(1);
        ASSERT_EQ(grad.sizes(), ref_grad.sizes());
        EXPECT_LT((grad.to(torch::kDouble) - ref_grad).abs().max().item<double>(), 2e-6) << "V " << V << " eps " << eps << " lanes " << cap;
        EXPECT_EQ(grad[150].abs().sum().item<float>(), 0.0f);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 7 * 2);
  // Non-finite logits: NaN anywhere in a row makes its loss NaN; +inf makes it non-finite.
  auto x = torch::randn({3, 40});
  x[0][7] = std::numeric_limits<float>::quiet_NaN();
  x[1][39] = std::numeric_limits<float>::infinity();
  CrossEntropyRows rows;
  ASSERT_TRUE(cross_entropy_rows(x, torch::zeros({3}, torch::kLong), torch::ones({3}, torch::kBool), 0.1, &rows));
  EXPECT_TRUE(std::isnan(rows.loss[0].item<float>()));
  EXPECT_FALSE(std::isfinite(rows.loss[1].item<float>()));
  EXPECT_TRUE(std::isfinite(rows.loss[2].item<float>()));
  // Double logits are ATen's; a target out of range and a wrong shape are refused.
  EXPECT_FALSE(cross_entropy_rows(x.to(torch::kDouble), torch::zeros({3}, torch::kLong), torch::ones({3}, torch::kBool), 0.0, &rows));
  EXPECT_THROW(cross_entropy_rows(x, torch::full({3}, 40, torch::kLong), torch::ones({3}, torch::kBool), 0.0, &rows), c10::Error);
  EXPECT_THROW(cross_entropy_rows(x, torch::zeros({2}, torch::kLong), torch::ones({2}, torch::kBool), 0.0, &rows), c10::Error);
}

TEST(OutputKernel, PackedLinearEqualsLinear) {
  // x W^T + b through the packed copy: no further from the double-precision product than ATen's float product
  // (twice its error, at least 1e-5 relative to the largest output), for row counts around the 8-row register
  // block and the 128-row block, column counts around the 32-column panel, input counts from none to past two
  // 512-input blocks, 1 to 4 threads (identical results: each output is one sum in the same order, as it is when x
  // or W come as transposed views), and [B, T, K] inputs. An in-place update of the weight or the
  // bias, or another weight, is seen by the next call (the packed copy is refreshed).
  if (!PackedLinear::available()) {
    std::printf("[ SKIPPED  ] no AVX-512 on this CPU: the packed output layer is ATen's linear here\n");
  }
  torch::NoGradGuard ng;
  int checked = 0;
  for (int64_t K : {0, 1, 5, 64, 1100}) {
    for (int64_t V : {1, 31, 32, 33, 97}) {
      for (int64_t B : {1, 7, 8, 9, 130}) {
        torch::manual_seed(static_cast<uint64_t>(K * 1000 + V * 10 + B));
        auto w = torch::randn({V, K}), b = torch::randn({V}), x = torch::randn({B, K});
        const auto ref = torch::addmm(b.to(torch::kDouble), x.to(torch::kDouble), w.to(torch::kDouble).t());
        const double scale = std::max(1.0, ref.abs().max().item<double>());
        const double aten_err = (torch::addmm(b, x, w.t()).to(torch::kDouble) - ref).abs().max().item<double>() / scale;
        PackedLinear packed;
        torch::Tensor first;
        for (int threads : {1, 2, 4}) {
          const auto y = packed(x, w, b, threads);
          ASSERT_EQ(y.sizes(), ref.sizes());
          EXPECT_LT((y.to(torch::kDouble) - ref).abs().max().item<double>() / scale, std::max(1e-5, 2 * aten_err))
              << "B " << B << " K " << K << " V " << V << " threads " << threads;
          if (!first.defined()) first = y;
          EXPECT_TRUE(torch::equal(y, first)) << "threads " << threads << " changed the result";
          ++checked;
        }
        // x read through its transpose (rows one float apart) and W packed from its transpose's rows.
        const torch::Tensor xt = x.t().contiguous(), wt = w.t().contiguous();
        PackedLinear transposed;
        const auto yt = transposed(xt.t(), wt.t(), b);
        ASSERT_EQ(yt.sizes(), ref.sizes());
        // The packed kernel reads both layouts in the same order: the same bits. Where it does not run, ATen's product
        // is the whole story, and a BLAS may round the two layouts differently (MKL on an AMD EPYC does): float rounding.
        if (PackedLinear::available())
          EXPECT_TRUE(torch::equal(yt, first)) << "B " << B << " K " << K << " V " << V << ": transposed operands";
        else
          EXPECT_LT((yt.to(torch::kDouble) - ref).abs().max().item<double>() / scale, std::max(1e-5, 2 * aten_err))
              << "B " << B << " K " << K << " V " << V << ": transposed operands";
      }
    }
  }
  EXPECT_EQ(checked, 5 * 5 * 5 * 3);
  // The benchmark's output layer, [B, T, K] input.
  torch::manual_seed(5);
  auto w = torch::randn({8000, 512}) * 0.05, b = torch::randn({8000}), x = torch::randn({3, 22, 512});
  PackedLinear packed;
  auto y = packed(x, w, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 22, 8000}));
  const auto ref = torch::nn::functional::linear(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
  EXPECT_LT((y.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-4);
  // Updates are seen: in place (version counters), and another tensor of the same shape.
  w.mul_(2);
  EXPECT_TRUE(torch::allclose(packed(x, w, b), torch::nn::functional::linear(x, w, b), 1e-4, 1e-4));
  b.add_(1);
  EXPECT_TRUE(torch::allclose(packed(x, w, b), torch::nn::functional::linear(x, w, b), 1e-4, 1e-4));
  auto w2 = torch::randn({8000, 512}) * 0.05;
  EXPECT_TRUE(torch::allclose(packed(x, w2, b), torch::nn::functional::linear(x, w2, b), 1e-4, 1e-4));
  // Gradients wanted, or another dtype: ATen's linear, exactly.
  auto d = torch::randn({4, 6}, torch::kDouble), wd = torch::randn({5, 6}, torch::kDouble);
  EXPECT_TRUE(torch::equal(packed(d, wd, torch::Tensor()), torch::nn::functional::linear(d, wd)));
  EXPECT_THROW(packed(torch::randn({2, 7}), w, b), c10::Error);
}

// Training's products on the packed kernel (forced on): train_linear's output and
// its three gradients, and product() with transposed views, against the same computed in double; with the BLAS
// forced, train_linear is torch's linear exactly. kAuto takes the packed kernel exactly where the BLAS runs a
// narrower family than the CPU's AVX-512.
TEST(OutputKernel, TrainLinearAndProductEqualDoublePrecision) {
  struct Reset {
    ~Reset() { set_product_kernel(ProductKernel::kAuto); }
  } reset;
  const std::string core = blas_kernel();
  const bool wide = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  EXPECT_EQ(packed_products(), PackedLinear::available() && !core.empty() && !wide) << core;
  if (!PackedLinear::available()) std::printf("[ SKIPPED  ] no AVX-512 on this CPU: training's products are the BLAS's here\n");
  set_product_kernel(ProductKernel::kPacked);
  EXPECT_EQ(packed_products(), PackedLinear::available());
  int checked = 0;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{37, 600}, {3, 5, 70}, {1, 1}, {130, 1100}}) {
    for (bool with_bias : {true, false}) {
      for (bool narrow_weight : {false, true}) {
        torch::manual_seed(static_cast<uint64_t>(shape.back() + 7 * with_bias + 13 * narrow_weight));
        const int64_t K = shape.back(), V = 70;
        torch::Tensor x = torch::randn(shape).requires_grad_();
        torch::Tensor w_full = torch::randn({V, K + 3}).requires_grad_();  // W as a narrowed view in one variant
        torch::Tensor w_own = torch::randn({V, K}).requires_grad_();
        torch::Tensor b = with_bias ? torch::randn({V}).requires_grad_() : torch::Tensor();
        const torch::Tensor w = narrow_weight ? w_full.narrow(1, 2, K) : w_own;
        std::vector<int64_t> out_shape = shape;
        out_shape.back() = V;
        const torch::Tensor g = torch::randn(out_shape);
        const torch::Tensor y = train_linear(x, w, b);
        ASSERT_EQ(y.sizes(), torch::IntArrayRef(out_shape));
        (y * g).sum().backward();
        // The reference: the same in double.
        torch::Tensor xd = x.detach().to(torch::kDouble).requires_grad_(), wd = w.detach().to(torch::kDouble).requires_grad_();
        torch::Tensor bd = with_bias ? b.detach().to(torch::kDouble).requires_grad_() : torch::Tensor();
        const torch::Tensor yd = torch::nn::functional::linear(xd, wd, bd);
        (yd * g.to(torch::kDouble)).sum().backward();
        auto close = [](const torch::Tensor& a, const torch::Tensor& ref) {
          const double scale = std::max(1.0, ref.abs().max().item<double>());
          return (a.to(torch::kDouble) - ref).abs().max().item<double>() / scale;
        };
        const torch::Tensor gw = narrow_weight ? w_full.grad().narrow(1, 2, K) : w_own.grad();
        ASSERT_TRUE(x.grad().defined() && gw.defined());
        ASSERT_EQ(x.grad().sizes(), x.sizes());
        ASSERT_EQ(gw.sizes(), w.sizes());
        EXPECT_LT(close(y.detach(), yd.detach()), 1e-5) << K;
        EXPECT_LT(close(x.grad(), xd.grad()), 1e-5) << K;
        EXPECT_LT(close(gw, wd.grad()), 1e-5) << K;
        if (narrow_weight) {  // the columns outside the view get no gradient
          EXPECT_EQ(w_full.grad().narrow(1, 0, 2).abs().max().item<float>(), 0.0f);
        }
        if (with_bias) {
          ASSERT_TRUE(b.grad().defined());
          EXPECT_LT(close(b.grad(), bd.grad()), 1e-5) << K;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * 2);
  // product(): a and b as given and as transposed views, against mm in double.
  torch::manual_seed(3);
  const torch::Tensor a = torch::randn({45, 700}), bm = torch::randn({700, 33});
  const torch::Tensor ref = torch::mm(a.to(torch::kDouble), bm.to(torch::kDouble));
  for (const auto& [aa, bb] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
           {a, bm}, {a.t().contiguous().t(), bm}, {a, bm.t().contiguous().t()}, {a.t().contiguous().t(), bm.t().contiguous().t()}}) {
    const torch::Tensor c = product(aa, bb);
    ASSERT_EQ(c.sizes(), ref.sizes());
    EXPECT_LT((c.to(torch::kDouble) - ref).abs().max().item<double>() / ref.abs().max().item<double>(), 1e-5);
  }
  EXPECT_THROW(product(a, a), c10::Error);
  // With the BLAS forced: torch's linear, bit for bit.
  set_product_kernel(ProductKernel::kBlas);
  EXPECT_FALSE(packed_products());
  const torch::Tensor x = torch::randn({9, 40}), w = torch::randn({20, 40}), b = torch::randn({20});
  EXPECT_TRUE(torch::equal(train_linear(x, w, b), torch::nn::functional::linear(x, w, b)));
  ProductKernel k;
  EXPECT_TRUE(parse_product_kernel("packed", &k) && k == ProductKernel::kPacked);
  EXPECT_FALSE(parse_product_kernel("fast", &k));
}

// batched_product (attention's batched products on the packed kernel) against bmm in double: the product and both
// gradients, for b as given, as a transposed view (the keys' transpose of a score product) and as a narrowed view, a
// read through a transposed view, sizes around the panel width and the row block (M 1, 9, 31; N 1, 30, 33, 512) and
// an empty depth; each product of a batch equal bit for bit to the same product alone (threads share the batch);
// with the BLAS forced, torch::bmm bit for bit.
TEST(OutputKernel, BatchedProductEqualsBmmInDoublePrecision) {
  struct Reset {
    ~Reset() { set_product_kernel(ProductKernel::kAuto); }
  } reset;
  if (!PackedLinear::available()) std::printf("[ SKIPPED  ] no AVX-512 on this CPU: batched_product is torch::bmm here\n");
  set_product_kernel(ProductKernel::kPacked);
  auto close = [](const torch::Tensor& a, const torch::Tensor& ref) {
    if (ref.numel() == 0) return 0.0;  // an empty depth: a's and b's gradients are empty (sizes asserted)
    const double scale = std::max(1.0, ref.abs().max().item<double>());
    return (a.to(torch::kDouble) - ref).abs().max().item<double>() / scale;
  };
  int checked = 0;
  for (const auto& d : std::vector<std::array<int64_t, 4>>{{3, 31, 512, 30}, {2, 1, 7, 33}, {4, 9, 30, 512}, {5, 8, 40, 1}, {2, 6, 0, 5},
                                                                     {64, 1, 128, 45}, {3, 12, 1, 20}}) {
    const int64_t Bt = d[0], M = d[1], K = d[2], N = d[3];
    for (int layout = 0; layout < 4; ++layout) {
      torch::manual_seed(static_cast<uint64_t>(M * 1000 + N * 10 + layout));
      // layout 0: both contiguous; 1: b a transposed view; 2: b narrowed from a wider tensor; 3: a a transposed view
      torch::Tensor a_leaf = layout == 3 ? torch::randn({Bt, K, M}).requires_grad_() : torch::randn({Bt, M, K}).requires_grad_();
      torch::Tensor b_leaf = layout == 1   ? torch::randn({Bt, N, K}).requires_grad_()
                             : layout == 2 ? torch::randn({Bt, K, N + 3}).requires_grad_()
                                           : torch::randn({Bt, K, N}).requires_grad_();
      const torch::Tensor a = layout == 3 ? a_leaf.transpose(1, 2) : a_leaf;
      const torch::Tensor b = layout == 1 ? b_leaf.transpose(1, 2) : layout == 2 ? b_leaf.narrow(2, 1, N) : b_leaf;
      const torch::Tensor g = torch::randn({Bt, M, N});
      const torch::Tensor c = batched_product(a, b);
      ASSERT_EQ(c.sizes(), torch::IntArrayRef({Bt, M, N}));
      (c * g).sum().backward();
      torch::Tensor ad = a.detach().to(torch::kDouble).requires_grad_(), bd = b.detach().to(torch::kDouble).requires_grad_();
      const torch::Tensor cd = torch::bmm(ad, bd);
      (cd * g.to(torch::kDouble)).sum().backward();
      const torch::Tensor ga = layout == 3 ? a_leaf.grad().transpose(1, 2) : a_leaf.grad();
      const torch::Tensor gb = layout == 1 ? b_leaf.grad().transpose(1, 2) : layout == 2 ? b_leaf.grad().narrow(2, 1, N) : b_leaf.grad();
      ASSERT_EQ(ga.sizes(), a.sizes());
      ASSERT_EQ(gb.sizes(), b.sizes());
      EXPECT_LT(close(c.detach(), cd.detach()), 1e-5) << M << " " << K << " " << N << " layout " << layout;
      EXPECT_LT(close(ga, ad.grad()), 1e-5) << M << " " << K << " " << N << " layout " << layout;
      EXPECT_LT(close(gb, bd.grad()), 1e-5) << M << " " << K << " " << N << " layout " << layout;
      if (K == 0) EXPECT_EQ(c.abs().max().item<float>(), 0.0f);
      if (layout == 2 && K > 0) {  // the columns outside the view get no gradient
        EXPECT_EQ(b_leaf.grad().narrow(2, 0, 1).abs().max().item<float>(), 0.0f);
      }
      torch::NoGradGuard ng;
      for (int64_t i = 0; i < Bt; ++i) {
        const torch::Tensor alone = batched_product(a.narrow(0, i, 1), b.narrow(0, i, 1));
        ASSERT_EQ(alone.sizes(), torch::IntArrayRef({1, M, N}));
        // Exactly, where the packed kernel runs; where it is torch::bmm, the BLAS may round a batch and a single
        // product differently (MKL on an AMD EPYC does): to float rounding.
        if (PackedLinear::available())
          EXPECT_TRUE(torch::equal(alone[0], c[i])) << "product " << i << " of " << Bt << ", layout " << layout;
        else
          EXPECT_LT(close(alone[0], c[i]), 1e-5) << "product " << i << " of " << Bt << ", layout " << layout;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7 * 4);
  EXPECT_THROW(batched_product(torch::randn({2, 3, 4}), torch::randn({2, 5, 6})), c10::Error);
  EXPECT_THROW(batched_product(torch::randn({2, 3, 4}), torch::randn({3, 4, 6})), c10::Error);
  EXPECT_EQ(batched_product(torch::randn({0, 3, 4}), torch::randn({0, 4, 6})).sizes(), torch::IntArrayRef({0, 3, 6}));
  set_product_kernel(ProductKernel::kBlas);
  const torch::Tensor a = torch::randn({3, 7, 20}), b = torch::randn({3, 20, 9});
  EXPECT_TRUE(torch::equal(batched_product(a, b), torch::bmm(a, b)));
}

// The GRU cell's one-pass row kernels against the same formulas in double: forward (r, z, n and h') and
// backward (the gradients of gi and gh and the direct part of h's), for every lane count this CPU can run, row
// widths around the lane counts, rows further apart than their width (views into larger tensors, as the
// recurrences pass them), and enough rows to be shared between threads; gru_cell takes the kernel for float and
// ATen's ops for double.
TEST(Rnn, GruCellKernelsEqualTheFormulas) {
  int checked = 0;
  for (int cap : {4, 8, 16})
  for (int64_t H : {1, 15, 16, 17, 40, 512}) {
    torch::manual_seed(static_cast<uint64_t>(H));
    const int64_t B = 40;
    const auto gi_wide = torch::randn({B, 3 * H + 5}) * 2, gh = torch::randn({B, 3 * H}) * 2, h_wide = torch::randn({B, 2 * H});
    const auto gi = gi_wide.narrow(1, 0, 3 * H), h = h_wide.narrow(1, H, H);
    torch::Tensor hn, rz, n;
    ASSERT_TRUE(gru_cell_kernel(gi, gh, h, H, &hn, &rz, &n, cap));
    const auto gid = gi.to(torch::kDouble), ghd = gh.to(torch::kDouble), hd = h.to(torch::kDouble);
    const auto rzd = (gid.narrow(1, 0, 2 * H) + ghd.narrow(1, 0, 2 * H)).sigmoid();
    const auto nd = (gid.narrow(1, 2 * H, H) + rzd.narrow(1, 0, H) * ghd.narrow(1, 2 * H, H)).tanh();
    const auto hnd = nd + rzd.narrow(1, H, H) * (hd - nd);
    ASSERT_EQ(hn.sizes(), hnd.sizes());
    ASSERT_EQ(rz.sizes(), rzd.sizes());
    EXPECT_LT((rz.to(torch::kDouble) - rzd).abs().max().item<double>(), 1e-6) << "H " << H;
    EXPECT_LT((n.to(torch::kDouble) - nd).abs().max().item<double>(), 2e-6) << "H " << H;
    EXPECT_LT((hn.to(torch::kDouble) - hnd).abs().max().item<double>(), 4e-6) << "H " << H;
    const GruCell c = gru_cell(gi, gh, h, H);  // the float entry point uses the kernel (the CPU's widest lanes)
    EXPECT_LT((c.h - hn).abs().max().item<double>(), 4e-6) << "H " << H << " lanes " << cap;
    // Backward for a gradient dh of h', into rows of wider buffers.
    const auto dh = torch::randn({B, H});
    auto dgi_wide = torch::full({B, 3 * H + 3}, 7.0f), dgh = torch::empty({B, 3 * H});
    auto dgi = dgi_wide.narrow(1, 0, 3 * H);
    torch::Tensor direct;
    ASSERT_TRUE(gru_cell_backward_kernel(dh, h, rz, n, gh.narrow(1, 2 * H, H), dgi, dgh, &direct, cap));
    const auto rd = rz.to(torch::kDouble).narrow(1, 0, H), zd = rz.to(torch::kDouble).narrow(1, H, H), n2 = n.to(torch::kDouble);
    const auto dd = dh.to(torch::kDouble);
    const auto d_pre_n = dd * (1 - zd) * (1 - n2 * n2);
    const auto d_r = d_pre_n * ghd.narrow(1, 2 * H, H) * rd * (1 - rd), d_z = dd * (hd - n2) * zd * (1 - zd);
    const auto ref_dgi = torch::cat({d_r, d_z, d_pre_n}, 1), ref_dgh = torch::cat({d_r, d_z, d_pre_n * rd}, 1);
    EXPECT_LT((dgi.to(torch::kDouble) - ref_dgi).abs().max().item<double>(), 1e-5) << "H " << H;
    EXPECT_LT((dgh.to(torch::kDouble) - ref_dgh).abs().max().item<double>(), 1e-5) << "H " << H;
    EXPECT_LT((direct.to(torch::kDouble) - dd * zd).abs().max().item<double>(), 1e-6) << "H " << H;
    EXPECT_EQ(dgi_wide.narrow(1, 3 * H, 3).ne(7.0f).sum().item<int64_t>(), 0) << "wrote past its rows";
    ++checked;
  }
  EXPECT_EQ(checked, 3 * 6);
  torch::Tensor hn, rz, n;
  EXPECT_FALSE(gru_cell_kernel(torch::randn({2, 6}, torch::kDouble), torch::randn({2, 6}, torch::kDouble),
                               torch::randn({2, 2}, torch::kDouble), 2, &hn, &rz, &n));
}

TEST(Rnn, DecodingStepEqualsOneStepForward) {
  // Rnn::step while decoding (packed products, gates by hand) gives what the LibTorch module gives for one step:
  // GRU and LSTM, one and two layers, over three chained steps (the state carries over).
  torch::NoGradGuard ng;
  for (RnnCell cell : {RnnCell::kGru, RnnCell::kLstm})
    for (int64_t layers : {1, 2}) {
      torch::manual_seed(7);
      Rnn rnn(cell, 37, 40, layers, 0.3, false);
      rnn->eval();
      const int64_t B = 11;
      RnnState a{torch::randn({layers, B, 40}), cell == RnnCell::kLstm ? torch::randn({layers, B, 40}) : torch::Tensor()};
      RnnState b = a;
      for (int t = 0; t < 3; ++t) {
        const torch::Tensor x = torch::randn({B, 37});
        auto [ya, sa] = rnn->step(x, a);
        auto [yb, sb] = rnn->forward(x.unsqueeze(1), b);
        ASSERT_EQ(ya.sizes(), (std::vector<int64_t>{B, 40}));
        ASSERT_EQ(sa.h.sizes(), sb.h.sizes());
        EXPECT_LT((ya - yb.squeeze(1)).abs().max().item<float>(), 1e-5) << "layers " << layers << " step " << t;
        EXPECT_LT((sa.h - sb.h).abs().max().item<float>(), 1e-5);
        if (cell == RnnCell::kLstm) {
          ASSERT_EQ(sa.c.sizes(), sb.c.sizes());
          EXPECT_LT((sa.c - sb.c).abs().max().item<float>(), 1e-5);
        }
        a = sa;
        b = sb;
      }
    }
}

TEST(Rnn, TrainingStepOnPackedProductsEqualsLibTorchGru) {
  // A one-layer GRU stepped under autograd (the decoder with input feeding in training) runs as a one-step
  // gru_sequence on packed products where those are on, ATen's GRU otherwise: same states and gradients over three
  // chained steps.
  struct Reset {
    ~Reset() { set_product_kernel(ProductKernel::kAuto); }
  } reset;
  if (!PackedLinear::available()) std::printf("[ SKIPPED  ] no AVX-512 on this CPU: both runs take ATen's GRU\n");
  const int64_t B = 9, In = 21, H = 34;
  torch::manual_seed(5);
  const torch::Tensor h0 = torch::randn({1, B, H});
  std::vector<torch::Tensor> xs, gs;
  for (int t = 0; t < 3; ++t) {
    xs.push_back(torch::randn({B, In}));
    gs.push_back(torch::randn({B, H}));
  }
  auto run = [&](ProductKernel k) {
    set_product_kernel(k);
    torch::manual_seed(11);
    Rnn rnn(RnnCell::kGru, In, H, 1, 0.0, false);
    const torch::Tensor h = h0.clone().requires_grad_();
    RnnState st{h, torch::Tensor()};
    torch::Tensor loss = torch::zeros({});
    std::vector<torch::Tensor> ys;
    for (int t = 0; t < 3; ++t) {
      auto [y, next] = rnn->step(xs[static_cast<size_t>(t)], st);
      EXPECT_EQ(y.sizes(), torch::IntArrayRef({B, H}));
      loss = loss + (y * gs[static_cast<size_t>(t)]).sum();
      ys.push_back(y.detach());
      st = next;
    }
    loss.backward();
    std::vector<torch::Tensor> out = ys;
    out.push_back(h.grad());
    for (const auto& p : rnn->parameters()) out.push_back(p.grad());
    return out;
  };
  const auto packed = run(ProductKernel::kPacked), blas = run(ProductKernel::kBlas);
  ASSERT_EQ(packed.size(), blas.size());
  ASSERT_EQ(packed.size(), 3u + 1u + 4u);
  for (size_t i = 0; i < packed.size(); ++i) {
    ASSERT_TRUE(packed[i].defined() && blas[i].defined()) << i;
    ASSERT_EQ(packed[i].sizes(), blas[i].sizes()) << i;
    const double scale = std::max(1.0, blas[i].abs().max().item<double>());
    EXPECT_LT((packed[i] - blas[i]).abs().max().item<double>() / scale, 1e-5) << "output " << i;
  }
}

TEST(Rnn, DecodingEncoderRunEqualsPacked) {
  // While decoding (eval mode, no gradients) the encoder's run by lengths goes through packed products (under
  // --kernels reference: the device path's node, both directions in one loop): outputs (zero at padding) and final
  // states equal the packed-sequence run, one and two layers, one and both directions.
  torch::NoGradGuard ng;
  for (KernelMode mode : {KernelMode::kAuto, KernelMode::kReference})
  for (int64_t layers : {1, 2})
    for (bool bidir : {false, true}) {
      const ScopedKernelMode kernels(mode);
      torch::manual_seed(9);
      Rnn rnn(RnnCell::kGru, 13, 24, layers, 0.2, bidir);
      rnn->eval();
      const torch::Tensor lengths = torch::tensor({7, 1, 4, 7, 2, 5, 3, 6, 7}, torch::kLong);
      const torch::Tensor x = torch::randn({9, 7, 13});
      auto [ya, sa] = rnn->forward_lengths(x, lengths);
      auto [yb, sb] = rnn->forward_packed(x, lengths);
      ASSERT_EQ(ya.sizes(), yb.sizes());
      ASSERT_EQ(sa.h.sizes(), sb.h.sizes());
      EXPECT_LT((ya - yb).abs().max().item<float>(), 1e-5) << "layers " << layers << " bidir " << bidir;
      EXPECT_LT((sa.h - sb.h).abs().max().item<float>(), 1e-5) << "layers " << layers << " bidir " << bidir;
    }
}

// The encoder's padded-batch GRU run equals the packed run: outputs (zero at padding), final states, and the
// gradients of the input and of every weight, for 1 and 2 layers, one and both directions. forward_lengths (one
// autograd node per layer and direction while training, kernels/gru_recurrence.h) against ATen's packed-sequence GRU:
// in double to 1e-10, and in float (where its per-step
// products run on packed weights on AVX-512 CPUs; 3H = 36 columns: one whole 32-column panel and a part) to
// float rounding. Under --kernels reference the same for the device path's node (both directions in one loop, a
// hand-derived backward in LibTorch operations: kernels/gru_recurrence_device.h).
TEST(Rnn, LengthsPathEqualsPacked) {
  for (KernelMode mode : {KernelMode::kAuto, KernelMode::kReference})
  for (auto dtype : {torch::kDouble, torch::kFloat})
  for (int64_t layers : {1, 2})
    for (bool bidir : {false, true}) {
      const ScopedKernelMode kernels(mode);
      const bool dbl = dtype == torch::kDouble;
      const int64_t H = dbl ? 4 : 12;
      torch::manual_seed(3);
      Rnn rnn(RnnCell::kGru, 5, H, layers, 0.0, bidir);
      rnn->to(dtype);
      const torch::Tensor lengths = torch::tensor({6, 1, 4, 6, 2}, torch::kLong);
      const torch::Tensor x = torch::randn({5, 6, 5}, dtype);
      const int64_t dirs = bidir ? 2 : 1;
      const torch::Tensor ry = torch::randn({5, 6, H * dirs}, dtype), rh = torch::randn({layers * dirs, 5, H}, dtype);
      auto run = [&](bool packed) {
        rnn->zero_grad();
        torch::Tensor xi = x.clone().requires_grad_(true);
        auto [y, st] = packed ? rnn->forward_packed(xi, lengths) : rnn->forward_lengths(xi, lengths);
        ((y * ry).sum() + (st.h * rh).sum()).backward();
        std::vector<torch::Tensor> out = {y.detach(), st.h.detach(), xi.grad()};
        for (const auto& p : rnn->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto a = run(true), b = run(false);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), 3u + static_cast<size_t>(4 * layers * dirs));
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].sizes(), b[i].sizes()) << i;
        const double diff = (a[i] - b[i]).abs().max().item<double>();
        if (dbl) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-10, 1e-12)) << "layers " << layers << " bidir " << bidir << " item " << i << " max diff " << diff;
        else EXPECT_LT(diff, 1e-4 * std::max(1.0, a[i].abs().max().item<double>())) << "float: layers " << layers << " bidir " << bidir << " item " << i;
      }
      EXPECT_EQ(b[0].select(0, 1).slice(0, 1).abs().sum().item<double>(), 0.0);  // padding after a 1-token sentence
      EXPECT_GT(b[2].abs().sum().item<double>(), 0.0);
    }
}

TEST(Model, OutputShapesAndWeights) {
  TinyBatch b = tiny_batch();
  for (const ModelConfig& m : all_models()) {
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    Seq2SeqOutput o = model->forward(b.src, b.len, b.mask, b.tgt_in);
    ASSERT_EQ(o.logits.sizes(), (std::vector<int64_t>{3, 4, 20})) << name_of(m);
    if (m.attention.type == attnmt::AttentionType::kNone) {
      EXPECT_FALSE(o.weights.defined());
    } else {
      ASSERT_EQ(o.weights.sizes(), (std::vector<int64_t>{3, 4, 5})) << name_of(m);
      EXPECT_TRUE(torch::allclose(o.weights.sum(-1), torch::ones({3, 4}), 1e-5, 1e-5));
      EXPECT_EQ(o.weights[1].slice(1, 3, 5).abs().sum().item<float>(), 0.0f);  // sentence 2 has 3 tokens
    }
    EXPECT_GT(model->parameter_count(), 0);
  }
}

TEST(Model, NoneIgnoresAllButTheFinalEncoderStateAttentionDoesNot) {
  TinyBatch b = tiny_batch();
  for (const ModelConfig& m : all_models()) {
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    torch::NoGradGuard ng;
    EncoderOutput enc = model->encode(b.src, b.len, b.mask);
    auto base = model->decode(enc, b.tgt_in).logits;
    EncoderOutput perturbed = enc;
    perturbed.states = enc.states.clone();
    perturbed.states.select(1, 0) += 1.0;  // every sentence's first state (not the final one)
    perturbed.states.select(1, 1) -= 1.0;
    auto changed = model->decode(perturbed, b.tgt_in).logits;
    double diff = (changed - base).abs().max().item<double>();
    if (m.attention.type == attnmt::AttentionType::kNone) {
      EXPECT_EQ(diff, 0.0) << name_of(m);
    } else {
      EXPECT_GT(diff, 1e-4) << name_of(m);
    }
  }
}

TEST(Model, PaddingInvariance) {
  TinyBatch b = tiny_batch(0), p = tiny_batch(3);  // same sentences, 3 extra padding columns
  for (const ModelConfig& m : all_models()) {
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    torch::NoGradGuard ng;
    EncoderOutput e1 = model->encode(b.src, b.len, b.mask);
    EncoderOutput e2 = model->encode(p.src, p.len, p.mask);
    ASSERT_EQ(e2.states.size(1), 8);
    EXPECT_TRUE(torch::allclose(e1.states, e2.states.slice(1, 0, 5), 1e-6, 1e-6)) << name_of(m);
    EXPECT_TRUE(torch::allclose(e1.final_h, e2.final_h, 1e-6, 1e-6)) << name_of(m);
    auto l1 = model->forward(b.src, b.len, b.mask, b.tgt_in).logits;
    auto l2 = model->forward(p.src, p.len, p.mask, p.tgt_in).logits;
    EXPECT_TRUE(torch::allclose(l1, l2, 1e-5, 1e-5)) << name_of(m);
  }
}

TEST(Model, StepwiseAndAllStepsPathsAgree) {
  TinyBatch b = tiny_batch();
  int checked = 0;
  for (const ModelConfig& m : all_models()) {
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    // Luong/scaled_dot without feeding: whole-sequence path; Bahdanau/none: batched readout. Luong with
    // input feeding has a single (stepwise) path.
    if (model->decoder->luong_style() && !model->decoder->can_run_all_steps()) continue;
    torch::NoGradGuard ng;
    auto fast = model->forward(b.src, b.len, b.mask, b.tgt_in, 1.0, false);
    auto slow = model->forward(b.src, b.len, b.mask, b.tgt_in, 1.0, true);
    EXPECT_TRUE(torch::allclose(fast.logits, slow.logits, 1e-5, 1e-5)) << name_of(m);
    ASSERT_EQ(fast.weights.defined(), slow.weights.defined()) << name_of(m);
    if (fast.weights.defined()) EXPECT_TRUE(torch::allclose(fast.weights, slow.weights, 1e-5, 1e-5)) << name_of(m);
    ++checked;
  }
  // luong dot/general/concat, scaled_dot x2; none, bahdanau (GRU, LSTM); the three self-attention pairings (for a
  // self-attention decoder the stepwise path is incremental decoding)
  EXPECT_EQ(checked, 5 + 3 + 3);
}

namespace {
// The logits of a teacher-forced forward (fast path or step by step) and every parameter's gradient of
// sum(logits * r).
std::vector<torch::Tensor> logits_and_gradients(Seq2Seq& model, const TinyBatch& b, const torch::Tensor& r, bool stepwise) {
  model->zero_grad();
  auto out = model->forward(b.src, b.len, b.mask, b.tgt_in, 1.0, stepwise);
  (out.logits * r).sum().backward();
  std::vector<torch::Tensor> g = {out.logits.detach()};
  for (const auto& p : model->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}
}  // namespace

// The fast training paths (the fused Bahdanau recurrence, the whole-sequence runs for `none` and Luong) give
// the gradients of the step-by-step path: every parameter's, in double.
TEST(Model, FastPathsGiveTheStepwiseGradients) {
  TinyBatch b = tiny_batch();
  int checked = 0;
  for (KernelMode mode : {KernelMode::kAuto, KernelMode::kReference})
  for (const ModelConfig& m : all_models()) {
    const ScopedKernelMode kernels(mode);
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->to(torch::kDouble);
    if (model->decoder->luong_style() && !model->decoder->can_run_all_steps()) continue;
    torch::manual_seed(1);
    const torch::Tensor r = torch::randn({3, 4, 20}, torch::kDouble);
    const auto fast = logits_and_gradients(model, b, r, false), slow = logits_and_gradients(model, b, r, true);
    ASSERT_EQ(fast.size(), slow.size()) << name_of(m);
    ASSERT_EQ(fast.size(), model->parameters().size() + 1) << name_of(m);
    for (size_t i = 0; i < fast.size(); ++i)
      EXPECT_TRUE(torch::allclose(fast[i], slow[i], 1e-9, 1e-11))
          << name_of(m) << " item " << i << " max diff " << (fast[i] - slow[i]).abs().max().item<double>();
    EXPECT_GT(fast.back().abs().sum().item<double>(), 0.0) << name_of(m);  // the output layer's bias got a gradient
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 11);
}

// The same in float for the fused Bahdanau recurrence, whose per-step products run on packed weights there
// (kernels/packed_product.h, where the CPU has AVX-512): every parameter's gradient equals the step-by-step
// path's (ATen's products) to float rounding.
TEST(Model, FusedRecurrenceInFloatGivesTheStepwiseGradients) {
  TinyBatch b = tiny_batch();
  torch::manual_seed(0);
  ModelConfig m = tiny_model("bahdanau");
  m.hidden_dim = 40;  // the packed products' panels of 32 columns: one whole, one partial
  Seq2Seq model(m, 20, 20);
  ASSERT_EQ(model->decoder->path_for(torch::Device(torch::kCPU), 1.0, false), DecoderPath::kFusedRecurrence);
  torch::manual_seed(1);
  const torch::Tensor r = torch::randn({3, 4, 20});
  const auto fast = logits_and_gradients(model, b, r, false), slow = logits_and_gradients(model, b, r, true);
  ASSERT_EQ(fast.size(), slow.size());
  ASSERT_EQ(fast.size(), model->parameters().size() + 1);
  for (size_t i = 0; i < fast.size(); ++i) {
    const double scale = std::max(1e-3, slow[i].abs().max().item<double>());
    EXPECT_LT((fast[i] - slow[i]).abs().max().item<double>() / scale, 1e-4) << "item " << i;
  }
}

TEST(Model, EveryAttentionTypeOverfitsEightPairs) {
  torch::manual_seed(5);
  const int64_t B = 8, S = 6, T = 6, V = 16;
  auto src = torch::randint(4, V, {B, S}, torch::kLong);
  auto tgt = src.flip({1});  // reverse the sentence: needs information from every source position
  auto len = torch::full({B}, S, torch::kLong);
  auto mask = src.ne(Vocab::kPad);
  auto tgt_in = torch::cat({torch::full({B, 1}, Vocab::kBos, torch::kLong), tgt.slice(1, 0, T - 1)}, 1);
  for (const ModelConfig& base : all_models()) {
    ModelConfig m = base;
    m.embed_dim = 16;
    m.hidden_dim = 24;
    torch::manual_seed(0);
    Seq2Seq model(m, V, V);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2));
    double loss_v = 0;
    for (int step = 0; step < 300; ++step) {
      opt.zero_grad();
      auto logits = model->forward(src, len, mask, tgt_in).logits;
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, V}), tgt.reshape(-1));
      loss.backward();
      opt.step();
      loss_v = loss.item<double>();
    }
    EXPECT_LT(loss_v, 0.05) << name_of(m);
  }
}

#include "model/flops.h"

TEST(Flops, HandCountForATinyBahdanauModel) {
  // E=4, H=6 (bidirectional: 3 per direction), A=6, V=10, B=2, S=3, T=5, GRU, one layer each.
  ModelConfig m;
  m.embed_dim = 4;
  m.hidden_dim = 6;
  m.attention.type = attnmt::AttentionType::kBahdanau;
  FlopCount f = count_flops(m, 10, 2, 3, 5);
  // encoder: 2 directions x 3 gates x 3 x (4 + 3) = 126 MACs per token, 6 source tokens -> 2*126*6
  EXPECT_DOUBLE_EQ(f.encoder, 2.0 * 126 * 6);
  // bridge: 6x6 per sentence
  EXPECT_DOUBLE_EQ(f.bridge, 2.0 * 2 * 36);
  // keys: U h_j, 6x6 per source token
  EXPECT_DOUBLE_EQ(f.keys, 2.0 * 6 * 36);
  // per step: GRU 3*6*(4+6+6) = 288; W q 36; scores 3*6 = 18; context 3*6 = 18; readout (12+4)*6 = 96 -> 456
  EXPECT_DOUBLE_EQ(f.decoder, 2.0 * 456 * 10);
  EXPECT_DOUBLE_EQ(f.output, 2.0 * 6 * 10 * 10);
  EXPECT_DOUBLE_EQ(f.train_step(), 3 * f.forward());
  // Luong general without feeding: GRU 3*6*(4+6) = 180; scores 18; context 18; combine 12*6 = 72 -> 288;
  // keys W h_j 6x6 per source token.
  m.attention.type = attnmt::AttentionType::kLuong;
  FlopCount g = count_flops(m, 10, 2, 3, 5);
  EXPECT_DOUBLE_EQ(g.decoder, 2.0 * 288 * 10);
  EXPECT_DOUBLE_EQ(g.keys, 2.0 * 6 * 36);
}

// What the program asks of each attention type, answered in one place (model/attention.cpp).
TEST(Attention, TraitsOfEachType) {
  struct Row {
    const char* type;
    const char* score;
    int heads;
    bool attends, after_rnn;
    const char* label;
    const char* summary;
  };
  const std::vector<Row> rows = {{"none", "", 1, false, false, "none", "none"},
                                 {"bahdanau", "", 1, true, false, "bahdanau", "bahdanau"},
                                 {"luong", "", 1, true, true, "luong-general", "luong/general"},
                                 {"luong", "dot", 1, true, true, "luong-dot", "luong/dot"},
                                 {"luong", "concat", 1, true, true, "luong-concat", "luong/concat"},
                                 {"scaled_dot", "", 1, true, true, "scaled_dot", "scaled_dot/1 head"},
                                 {"scaled_dot", "", 4, true, true, "scaled_dot", "scaled_dot/4 heads"}};
  ASSERT_EQ(rows.size(), 7u);
  for (const auto& r : rows) {
    AttentionConfig a;
    a.type = attention_type_from_string(r.type);
    if (*r.score) a.score = luong_score_from_string(r.score);
    a.heads = r.heads;
    const AttentionTraits t = attention_traits(a);
    EXPECT_EQ(t.attends, r.attends) << r.label;
    EXPECT_EQ(t.after_rnn, r.after_rnn) << r.label;
    EXPECT_EQ(t.label, r.label);
    EXPECT_EQ(t.summary, r.summary);
  }
  // Multiply-adds with H = 6, A = 4, S = 3: Luong dot has no key projection; concat scores as Bahdanau does.
  AttentionConfig dot;
  dot.type = attention_type_from_string("luong");
  dot.score = luong_score_from_string("dot");
  EXPECT_DOUBLE_EQ(attention_macs(dot, 6, 4, 3).per_source_token, 0.0);
  EXPECT_DOUBLE_EQ(attention_macs(dot, 6, 4, 3).per_step, 36.0);
  AttentionConfig concat = dot;
  concat.score = luong_score_from_string("concat");
  AttentionConfig bahdanau;
  bahdanau.type = attention_type_from_string("bahdanau");
  EXPECT_DOUBLE_EQ(attention_macs(concat, 6, 4, 3).per_step, attention_macs(bahdanau, 6, 4, 3).per_step);
  EXPECT_DOUBLE_EQ(attention_macs(bahdanau, 6, 4, 3).per_step, 24.0 + 12.0 + 18.0);
  AttentionConfig none;
  none.type = attention_type_from_string("none");
  EXPECT_DOUBLE_EQ(attention_macs(none, 6, 4, 3).per_step, 0.0);
}

// forward() chooses its path in one place; each model type takes the path its design allows.
TEST(Decoder, PathIsChosenInOnePlace) {
  const torch::Device cpu(torch::kCPU);
  auto path = [&](const ModelConfig& m, double tf = 1.0, bool stepwise = false) {
    Seq2Seq model(m, 20, 20);
    return model->decoder->path_for(cpu, tf, stepwise);
  };
  EXPECT_EQ(path(tiny_model("none")), DecoderPath::kFixedContext);
  EXPECT_EQ(path(tiny_model("bahdanau")), DecoderPath::kFusedRecurrence);
  EXPECT_EQ(path(tiny_model("bahdanau", "", 1, false, "lstm")), DecoderPath::kSteppedRecurrence);
  EXPECT_EQ(path(tiny_model("luong", "concat")), DecoderPath::kAllSteps);
  EXPECT_EQ(path(tiny_model("scaled_dot", "", 3)), DecoderPath::kAllSteps);
  EXPECT_EQ(path(tiny_model("luong", "general", 1, true)), DecoderPath::kTokenByToken);
  EXPECT_EQ(path(tiny_model("bahdanau"), 0.5), DecoderPath::kTokenByToken);
  EXPECT_EQ(path(tiny_model("luong", "dot"), 1.0, true), DecoderPath::kTokenByToken);
  ModelConfig two_layers = tiny_model("bahdanau");
  two_layers.decoder_layers = 2;
  EXPECT_EQ(path(two_layers), DecoderPath::kSteppedRecurrence);
  const ModelConfig sa = with_stacks(tiny_model("scaled_dot", "", 3), LayerType::kRnn, LayerType::kSelfAttention);
  EXPECT_EQ(path(sa), DecoderPath::kSelfAttention);
  EXPECT_EQ(path(sa, 0.5), DecoderPath::kTokenByToken);  // sampled inputs: incremental decoding, step by step
  EXPECT_EQ(path(sa, 1.0, true), DecoderPath::kTokenByToken);
}
