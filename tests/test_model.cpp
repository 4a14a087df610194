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

// A stacked one-direction GRU trained as a whole sequence (the decoder without input feeding) runs layer by layer,
// each layer one node (kernels/gru_recurrence.h): outputs, final states and every gradient equal ATen's stacked GRU,
// 1 to 3 layers, from a given state, in double; with dropout between the layers, training differs and eval does not.
TEST(Rnn, StackedSequenceEqualsAtenGru) {
  for (KernelMode mode : {KernelMode::kAuto, KernelMode::kReference})
    for (int64_t layers : {1, 2, 3}) {
      const ScopedKernelMode kernels(mode);
      torch::manual_seed(4);
      const int64_t B = 3, S = 5, In = 6, H = 4;
      Rnn rnn(RnnCell::kGru, In, H, layers, 0.0, false);
      rnn->to(torch::kDouble);
      const torch::Tensor x = torch::randn({B, S, In}, torch::kDouble), h0 = torch::randn({layers, B, H}, torch::kDouble);
      const torch::Tensor ry = torch::randn({B, S, H}, torch::kDouble), rh = torch::randn({layers, B, H}, torch::kDouble);
      auto run = [&](bool aten) {
        rnn->zero_grad();
        torch::Tensor xi = x.clone().requires_grad_(true);
        torch::Tensor y, h;
        if (aten) {
          std::tie(y, h) = at::gru(xi, h0, rnn->parameters(), true, layers, 0.0, true, false, true);
        } else {
          auto [yo, st] = rnn->forward(xi, RnnState{h0, torch::Tensor()});
          y = yo;
          h = st.h;
        }
        ((y * ry).sum() + (h * rh).sum()).backward();
        std::vector<torch::Tensor> out = {y.detach(), h.detach(), xi.grad()};
        for (const auto& p : rnn->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto a = run(true), b = run(false);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), 3u + static_cast<size_t>(4 * layers));
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].sizes(), b[i].sizes()) << i;
        EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-10, 1e-12)) << "layers " << layers << " item " << i;
      }
    }
  torch::manual_seed(4);
  Rnn rnn(RnnCell::kGru, 6, 4, 2, 0.5, false);
  const torch::Tensor x = torch::randn({3, 5, 6}).requires_grad_(true), h0 = torch::zeros({2, 3, 4});
  const torch::Tensor plain = std::get<0>(at::gru(x, h0, rnn->parameters(), true, 2, 0.0, false, false, true)).detach();
  rnn->eval();
  EXPECT_TRUE(torch::allclose(rnn->forward(x, RnnState{}).first, plain, 1e-5, 1e-6));
  rnn->train();
  const torch::Tensor dropped = rnn->forward(x, RnnState{}).first;
  ASSERT_EQ(dropped.sizes(), plain.sizes());
  EXPECT_GT((dropped - plain).abs().max().item<double>(), 1e-3);  // the first layer's outputs were dropped
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
    if (fast.weights.defined()) {
      EXPECT_TRUE(torch::allclose(fast.weights, slow.weights, 1e-5, 1e-5)) << name_of(m);
    }
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

// model.tie_output: the output layer's weights are the target embedding table (one tensor, one parameter), in the
// RNN and the self-attention decoder alike; only the bias is the output layer's own.
TEST(Model, TiedOutputLayerIsTheEmbeddingTable) {
  TinyBatch b = tiny_batch();
  for (ModelConfig m : {tiny_model("bahdanau"), with_stacks(tiny_model("scaled_dot", "", 2), LayerType::kSelfAttention,
                                                            LayerType::kSelfAttention)}) {
    m.embed_dim = m.hidden_dim = 12;
    torch::manual_seed(0);
    Seq2Seq untied(m, 20, 20);
    m.tie_output = true;
    torch::manual_seed(0);
    Seq2Seq tied(m, 20, 20);
    EXPECT_EQ(untied->parameter_count() - tied->parameter_count(), 12 * 20) << name_of(m);  // W_o [V, H] is gone
    const auto params = tied->named_parameters();
    EXPECT_EQ(params.find("decoder.out.weight"), nullptr) << name_of(m);
    ASSERT_NE(params.find("decoder.out_bias"), nullptr) << name_of(m);
    const torch::Tensor table = params["decoder.embed.weight"];
    // N(0, 1/E) so that the first logits are of unit scale; the padding row zero
    EXPECT_NEAR(table.slice(0, 1).std().item<double>(), 1.0 / std::sqrt(12.0), 0.05) << name_of(m);
    EXPECT_EQ(table[Vocab::kPad].abs().sum().item<float>(), 0.0f) << name_of(m);
    {
      torch::NoGradGuard ng;
      params["decoder.out_bias"].copy_(torch::linspace(-1, 1, 20));
    }
    const torch::Tensor r = torch::randn({5, 12});
    const torch::Tensor want = torch::matmul(r, table.t()) + params["decoder.out_bias"];
    tied->train();  // training's product
    EXPECT_TRUE(torch::allclose(tied->decoder->logits(r), want, 1e-5, 1e-5)) << name_of(m);
    tied->eval();
    {
      torch::NoGradGuard ng;  // decoding's packed product
      EXPECT_TRUE(torch::allclose(tied->decoder->logits(r), want, 1e-5, 1e-5)) << name_of(m);
    }
    // The output layer trains the table: <eos> never enters tgt_in, so its row's gradient comes from the logits alone.
    tied->train();
    tied->zero_grad();
    (tied->forward(b.src, b.len, b.mask, b.tgt_in).logits * torch::randn({3, 4, 20})).sum().backward();
    ASSERT_TRUE(table.grad().defined()) << name_of(m);
    EXPECT_GT(table.grad()[Vocab::kEos].abs().sum().item<double>(), 0.0) << name_of(m);
    EXPECT_FALSE(torch::any(b.tgt_in.eq(Vocab::kEos)).item<bool>());
  }
}

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
