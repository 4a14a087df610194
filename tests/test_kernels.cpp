// The kernels (src/kernels/): each kernel against the formula or LibTorch operation it replaces, and the kernel switch
// end to end (src/kernels/README.md): every model kind trained, decoded and mapped under --kernels auto and --kernels
// reference gives the same numbers, and resuming under reference is exact. The reference path is the one a CUDA device
// takes, so these tests cover on a CPU what a GPU run executes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "common/config.h"
#include "common/runtime.h"
#include "kernels/additive_scores.h"
#include "kernels/gru_gates.h"
#include "kernels/gru_recurrence.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "kernels/softmax_rows.h"
#include "model/attention.h"
#include "model/decoder.h"
#include "support.h"
#include "train/trainer.h"
#include "translate/translator.h"

namespace attnmt::kernel_switch_test {

const std::string& corpus() {
  static std::string dir = test::tiny_toy_corpus("kernels_corpus", 64, 8, 8, 14);
  return dir;
}

struct Kind {
  std::string name;
  std::function<void(Config&)> set;
};

std::vector<Kind> kinds() {
  auto luong = [](LuongScore s, bool feeding) {
    return [s, feeding](Config& c) {
      c.model.attention.type = AttentionType::kLuong;
      c.model.attention.score = s;
      c.model.input_feeding = feeding;
    };
  };
  return {
      {"none", [](Config& c) { c.model.attention.type = AttentionType::kNone; }},
      {"bahdanau", [](Config&) {}},
      {"luong_dot", luong(LuongScore::kDot, false)},
      {"luong_dot_feeding", luong(LuongScore::kDot, true)},
      {"luong_general", luong(LuongScore::kGeneral, false)},
      {"luong_general_feeding", luong(LuongScore::kGeneral, true)},
      {"luong_concat", luong(LuongScore::kConcat, false)},
      {"luong_concat_feeding", luong(LuongScore::kConcat, true)},
      {"scaled_dot_4_heads",
       [](Config& c) {
         c.model.attention.type = AttentionType::kScaledDot;
         c.model.attention.heads = 4;
       }},
      {"lstm", [](Config& c) { c.model.rnn = RnnCell::kLstm; }},
      // Without dropout: between encoder layers the CPU path drops out of the padded [B, S, H] states, ATen's packed GRU
      // (the reference's, and a GPU's) out of its packed rows, so the two draw different masks from the same seed.
      {"two_encoder_layers",
       [](Config& c) {
         c.model.encoder_layers = 2;
         c.model.dropout = 0;
       }},
  };
}

Config config_for(const Kind& k, const std::string& run_dir) {
  Config c = test::tiny_config_for(corpus(), run_dir, "bahdanau");
  c.model.dropout = 0.1;  // dropout draws random numbers under both switches
  c.train.batch_size = 16;
  c.train.valid_every = 1;  // every step is logged: its training loss and a validation
  c.train.max_steps = 6;
  c.train.seed = 3;
  c.train.snapshot_sentences = 0;
  c.eval.batch_size = 4;  // batches with padding
  k.set(c);
  validate(c);
  return c;
}

std::vector<nlohmann::json> metrics(const std::string& dir) { return test::read_metrics(dir); }

void train_under(KernelMode m, const Config& c, const TrainOptions& o = {}) {
  const ScopedKernelMode mode(m);
  train(c, o, torch::kCPU);
}

std::vector<std::string> test_sources() {
  std::vector<std::string> lines;
  std::istringstream in(test::read_file(corpus() + "/test.en"));
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

struct Decoded {
  std::vector<std::vector<Translation>> nbest;            // per sentence, best first
  std::vector<std::vector<std::vector<float>>> forced;    // forced attention maps [sentence][tgt][src]
};

Decoded decode_under(KernelMode m, const std::string& run_dir, int beam) {
  const ScopedKernelMode mode(m);
  LoadedRun run = load_run(run_dir, "last", "cpu");
  SearchOptions opt;
  opt.keep_weights = true;
  opt.beam_size = beam;
  opt.nbest = beam > 1 ? 2 : 1;
  Decoded d;
  const std::vector<std::string> src = test_sources();
  d.nbest = Translator(run, opt, 4).nbest(src);
  std::vector<std::vector<std::string>> s, t;
  for (size_t i = 0; i < src.size(); ++i) {
    s.push_back(d.nbest[i][0].src_tokens);
    t.push_back(d.nbest[i][0].tgt_tokens);
  }
  d.forced = forced_attention(run, s, t);
  return d;
}

void expect_maps_near(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size()) << what << " row " << r;
    for (size_t c = 0; c < a[r].size(); ++c) EXPECT_NEAR(a[r][c], b[r][c], 1e-4) << what << " at " << r << ", " << c;
  }
}

// Returns whether any logged loss differs in its bits between the switches (the kernels' rounding): the switch did switch.
bool expect_same_training(const Kind& k) {
  const std::string a = test::temp_dir("kernels_auto_" + k.name), r = test::temp_dir("kernels_ref_" + k.name);
  train_under(KernelMode::kAuto, config_for(k, a));
  train_under(KernelMode::kReference, config_for(k, r));
  const auto ma = metrics(a), mr = metrics(r);
  EXPECT_EQ(ma.size(), 6u) << k.name;
  EXPECT_EQ(mr.size(), ma.size()) << k.name;
  if (mr.size() != ma.size()) return false;
  bool bits_differ = false;
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["step"], mr[i]["step"]) << k.name;
    for (const char* key : {"train_loss", "valid_loss"}) {
      const double x = ma[i][key].get<double>(), y = mr[i][key].get<double>();
      bits_differ = bits_differ || x != y;
      EXPECT_NEAR(x, y, 1e-4 * std::abs(y)) << k.name << ": " << key << " at step " << ma[i]["step"];
    }
  }
  // The same model decoded under each switch: the same hypotheses (tokens and order), scores and maps.
  [&] {
  for (int beam : {1, 3}) {
    const Decoded da = decode_under(KernelMode::kAuto, a, beam), dr = decode_under(KernelMode::kReference, a, beam);
    ASSERT_EQ(da.nbest.size(), test_sources().size());
    ASSERT_EQ(dr.nbest.size(), da.nbest.size());
    for (size_t i = 0; i < da.nbest.size(); ++i) {
      const std::string what = k.name + " beam " + std::to_string(beam) + " sentence " + std::to_string(i);
      ASSERT_EQ(da.nbest[i].size(), dr.nbest[i].size()) << what;
      for (size_t h = 0; h < da.nbest[i].size(); ++h) {
        EXPECT_EQ(da.nbest[i][h].tgt_tokens, dr.nbest[i][h].tgt_tokens) << what << " hypothesis " << h;
        EXPECT_NEAR(da.nbest[i][h].logprob, dr.nbest[i][h].logprob, 1e-4 * std::max(1.0, std::abs(dr.nbest[i][h].logprob))) << what;
        if (k.name != "none") expect_maps_near(da.nbest[i][h].weights, dr.nbest[i][h].weights, what + " search map");
      }
    }
    ASSERT_EQ(da.forced.size(), dr.forced.size());
    for (size_t i = 0; i < da.forced.size(); ++i) expect_maps_near(da.forced[i], dr.forced[i], k.name + " forced map " + std::to_string(i));
  }
  }();
  return bits_differ;
}

// One test per group of kinds, so that ctest runs them side by side.
// Each also requires that the switch changed the arithmetic somewhere (a switch that did nothing would pass the rest).
TEST(Kernels, ReferencePathGivesTheSameTrainingDecodingAndMapsForRecurrentAndAdditiveModels) {
  int runs = 0, differing = 0;
  for (const Kind& k : kinds())
    if (k.name == "none" || k.name == "bahdanau" || k.name == "lstm" || k.name == "two_encoder_layers") {
      ++runs;
      differing += expect_same_training(k);
    }
  EXPECT_EQ(runs, 4);
  EXPECT_GT(differing, 0);
}

TEST(Kernels, ReferencePathGivesTheSameTrainingDecodingAndMapsForLuongAndScaledDotModels) {
  int runs = 0, differing = 0;
  for (const Kind& k : kinds())
    if (k.name.rfind("luong", 0) == 0 || k.name == "scaled_dot_4_heads") {
      ++runs;
      differing += expect_same_training(k);
    }
  EXPECT_EQ(runs, 7);
  EXPECT_GT(differing, 0);
}

// The reference path takes the paths a CUDA tensor takes: the same one-node recurrence, made of LibTorch operations
// (kernels/gru_recurrence_device.h) instead of the CPU kernels.
TEST(Kernels, ReferenceModeTakesTheDevicePaths) {
  Config c = config_for(kinds()[1], test::temp_dir("kernels_paths"));
  Decoder d(c.model, 20);
  {
    const ScopedKernelMode mode(KernelMode::kReference);
    EXPECT_FALSE(kernels_on(torch::kCPU));
    EXPECT_FALSE(kernels_for(torch::zeros({2}, torch::kFloat)));
    EXPECT_EQ(d->path_for(torch::kCPU, 1.0, false), DecoderPath::kFusedRecurrence);
  }
  const ScopedKernelMode mode(KernelMode::kAuto);
  EXPECT_TRUE(kernels_on(torch::kCPU));
  EXPECT_TRUE(kernels_for(torch::zeros({2}, torch::kFloat)));
  EXPECT_FALSE(kernels_for(torch::zeros({2}, torch::kDouble)));
  EXPECT_EQ(d->path_for(torch::kCPU, 1.0, false), DecoderPath::kFusedRecurrence);
}

// Resuming under reference continues the straight run's trajectory to the last digit, as it does under auto.
TEST(Kernels, ResumeUnderReferenceIsExact) {
  int cases = 0;
  for (const Kind& k : kinds()) {
    if (k.name != "bahdanau" && k.name != "luong_general_feeding") continue;
    ++cases;
    SCOPED_TRACE(k.name);
    // 8 steps cross the epoch boundary (4 batches an epoch); stopped at 3, resumed to 8, all under reference.
    const auto t = test::train_straight_and_resumed("kernels_" + k.name, [&](const std::string& dir) { return config_for(k, dir); }, 3, 8,
                                                    [](const Config& c, bool resume) {
                                                      TrainOptions o;
                                                      o.resume = resume;
                                                      train_under(KernelMode::kReference, c, o);
                                                    });
    ASSERT_EQ(t.straight.size(), 8u);
    test::expect_same_trajectory(t, 8, {"train_loss", "valid_loss", "valid_bleu"});
  }
  EXPECT_EQ(cases, 2) << "the two kinds this test resumes were not found among kinds()";
}

}  // namespace attnmt::kernel_switch_test

// The kernels against what they stand for: each equals the formula or the LibTorch operation it replaces (in double
// precision where the kernel sums in another order).
namespace attnmt::kernel_equality_test {

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
        if (V >= 3) {
          EXPECT_EQ(k.ids[5].item<int64_t>(), V - 2) << "ties go to the first index";
        }
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
      if (K == 0) {
        EXPECT_EQ(c.abs().max().item<float>(), 0.0f);
      }
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

}  // namespace attnmt::kernel_equality_test
