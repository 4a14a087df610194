// The attention lab: its measurements on cases with a closed form, the experiment keys (scale, mask) changing what
// they should and nothing else, the counterfactual weights, and the lab command's inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/config.h"
#include "common/errors.h"
#include "data/special_tokens.h"
#include "data/toy_corpus.h"
#include "lab/measures.h"
#include "model/attention.h"
#include "model/seq2seq.h"
#include "support.h"

using namespace attnmt;

namespace {

ModelConfig small_model(AttentionType type) {
  ModelConfig m;
  m.embed_dim = 8;
  m.hidden_dim = 16;
  m.dropout = 0.0;
  m.attention.type = type;
  if (type == AttentionType::kScaledDot) m.attention.heads = 2;
  return m;
}

// Two sentences of lengths 6 and 2 (the second padded by 4) over a vocabulary of 20, targets of 3 tokens.
struct PaddedBatch {
  torch::Tensor src, len, mask, tgt_in;
};
PaddedBatch padded_batch() {
  torch::manual_seed(5);
  PaddedBatch b;
  b.src = torch::full({2, 6}, kPadId, torch::kLong);
  b.src[0] = torch::randint(4, 20, {6}, torch::kLong);
  b.src[1].slice(0, 0, 2) = torch::randint(4, 20, {2}, torch::kLong);
  b.len = torch::tensor(std::vector<int64_t>{6, 2}, torch::kLong);
  b.mask = b.src.ne(kPadId);
  b.tgt_in = torch::cat({torch::full({2, 1}, kBosId, torch::kLong), torch::randint(4, 20, {2, 2}, torch::kLong)}, 1);
  return b;
}

}  // namespace

TEST(LabMeasures, GradientTimesInputOfALinearScorerIsItsClosedForm) {
  // f(x) = sum_{n,d} W[n,d] x[n,d] + 0.5: df/dx = W, so the attribution of position n is sum_d W[n,d] x[n,d].
  torch::manual_seed(1);
  const torch::Tensor W = torch::randn({5, 3}, torch::kDouble), x = torch::randn({5, 3}, torch::kDouble);
  const auto a = gradient_times_input([&](const torch::Tensor& v) { return (W * v).sum() + 0.5; }, x);
  ASSERT_EQ(a.size(), 5u);
  for (int64_t n = 0; n < 5; ++n) EXPECT_NEAR(a[static_cast<size_t>(n)], (W[n] * x[n]).sum().item<double>(), 1e-12) << n;
  // A quadratic scorer f = sum x^2 gives 2 x^2 per feature: gradient x input is not the gradient alone.
  const auto q = gradient_times_input([](const torch::Tensor& v) { return (v * v).sum(); }, x);
  ASSERT_EQ(q.size(), 5u);
  for (int64_t n = 0; n < 5; ++n) EXPECT_NEAR(q[static_cast<size_t>(n)], 2 * (x[n] * x[n]).sum().item<double>(), 1e-12) << n;
}

TEST(LabMeasures, LeaveOneOutOfAWordTheModelIgnoresIsZero) {
  // A scorer per target token t: sum over source positions n != 2 of v[token] * (t + 1); position 2 is ignored.
  const std::vector<double> v = {0.0, -0.5, 0, 0, 1.0, 2.0, 3.0, 4.0};
  auto score = [&](const std::vector<std::vector<int64_t>>& variants) {
    std::vector<std::vector<double>> out;
    for (const auto& toks : variants) {
      std::vector<double> per_t;
      for (int t = 0; t < 3; ++t) {
        double s = 0;
        for (size_t n = 0; n < toks.size(); ++n)
          if (n != 2) s += v[static_cast<size_t>(toks[n])] * (t + 1);
        per_t.push_back(s);
      }
      out.push_back(per_t);
    }
    return out;
  };
  const std::vector<int64_t> tokens = {4, 5, 6, 7};
  const auto loo = leave_one_out(score, tokens, kUnkId);
  ASSERT_EQ(loo.size(), 3u);  // one row per target token
  for (int t = 0; t < 3; ++t) {
    ASSERT_EQ(loo[static_cast<size_t>(t)].size(), 4u);
    EXPECT_EQ(loo[static_cast<size_t>(t)][2], 0.0) << "the ignored word has an effect at t=" << t;
    for (size_t n : {0u, 1u, 3u})  // the others: their contribution minus <unk>'s
      EXPECT_NEAR(loo[static_cast<size_t>(t)][n], (v[static_cast<size_t>(tokens[n])] - v[kUnkId]) * (t + 1), 1e-12);
  }
}

TEST(LabMeasures, FittedExponentOfASyntheticQuadraticCostIsTwo) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  std::vector<double> x, y, lin;
  for (double t : {10.0, 20.0, 50.0, 100.0, 200.0, 400.0}) {
    x.push_back(t);
    y.push_back(3e-6 * t * t * noise(gen));
    lin.push_back(0.2 * t + 1e-9 * t * t);
  }
  const PowerLaw p = fit_power_law(x, y);
  EXPECT_EQ(p.points, 6);
  EXPECT_NEAR(p.exponent, 2.0, 0.05);
  EXPECT_NEAR(p.factor, 3e-6, 3e-6 * 0.2);
  EXPECT_GT(p.r2, 0.99);
  EXPECT_NEAR(fit_power_law(x, lin).exponent, 1.0, 0.05);
  // Points with a non-positive value are left out; fewer than two give no fit.
  EXPECT_EQ(fit_power_law({1.0, 2.0}, {0.0, 4.0}).points, 1);
  EXPECT_EQ(fit_power_law({1.0, 2.0}, {0.0, 4.0}).exponent, 0.0);
}

TEST(LabMeasures, KendallTauCountsConcordantPairs) {
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  // (1,2,3) vs (1,3,2): pairs (0,1) and (0,2) concordant, (1,2) discordant: (2 - 1) / 3.
  EXPECT_NEAR(kendall_tau({1, 2, 3}, {1, 3, 2}), 1.0 / 3.0, 1e-12);
  EXPECT_EQ(kendall_tau({1, 1, 1}, {1, 2, 3}), 0.0);  // a constant row says nothing
}

TEST(LabMeasures, RowStatisticsAndDiagonalDistance) {
  const std::vector<std::vector<float>> diag = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  EXPECT_DOUBLE_EQ(diagonal_distance(diag), 0.0);
  const RowStats d = row_stats(diag);
  EXPECT_EQ(d.rows, 3);
  EXPECT_DOUBLE_EQ(d.mean_max, 1.0);
  EXPECT_DOUBLE_EQ(d.mean_entropy, 0.0);
  const std::vector<std::vector<float>> flipped = {{0, 0, 1}, {0, 1, 0}, {1, 0, 0}};
  EXPECT_NEAR(diagonal_distance(flipped), (2.0 + 0.0 + 2.0) / 3.0, 1e-12);
  const RowStats u = row_stats({{0.25f, 0.25f, 0.25f, 0.25f}});
  EXPECT_NEAR(u.mean_entropy, std::log(4.0), 1e-6);
  EXPECT_NEAR(u.mean_max, 0.25, 1e-7);
  EXPECT_EQ(argmax({0.1, 0.7, 0.7, 0.2}), 1);
  EXPECT_EQ(argmax({}), -1);
}

// model.attention.scale false: the scores are sqrt(d) times larger, the parameters the same.
TEST(LabKeys, ScaleOffMultipliesTheScoresBySqrtDAndChangesNothingElse) {
  ModelConfig on = small_model(AttentionType::kScaledDot), off = on;
  off.attention.scale = false;
  torch::manual_seed(0);
  Seq2Seq a(on, 20, 20);
  torch::manual_seed(0);
  Seq2Seq b(off, 20, 20);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) {
    ASSERT_TRUE(pb.contains(p.key())) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  }
  const PaddedBatch x = padded_batch();
  a->eval();
  b->eval();
  std::vector<torch::Tensor> sa, sb;
  auto into = [](std::vector<torch::Tensor>& sink) {
    return [&sink](const torch::Tensor&, const AttentionMemory&, const AttentionOutput& out) { sink.push_back(out.scores); };
  };
  a->decoder->attention()->observe(into(sa));
  b->decoder->attention()->observe(into(sb));
  torch::NoGradGuard ng;
  const auto oa = a->forward(x.src, x.len, x.mask, x.tgt_in), ob = b->forward(x.src, x.len, x.mask, x.tgt_in);
  ASSERT_EQ(sa.size(), 1u);
  ASSERT_EQ(sb.size(), 1u);
  const double sqrt_d = std::sqrt(16.0 / 2.0);  // attention dim 16 over 2 heads
  EXPECT_TRUE(torch::allclose(sb[0], sa[0] * sqrt_d, 1e-5, 1e-6));
  EXPECT_GT((oa.weights - ob.weights).abs().max().item<double>(), 1e-4);  // the softmax sees different scores
  // Still a masked softmax: padding gets exactly 0 in both.
  EXPECT_EQ(ob.weights[1].slice(1, 2, 6).abs().sum().item<double>(), 0.0);
}

// model.attention.mask false: without padding nothing changes; with it, padding gets weight.
TEST(LabKeys, MaskOffLetsPaddingInAndChangesNothingWithoutPadding) {
  for (AttentionType type : {AttentionType::kBahdanau, AttentionType::kLuong, AttentionType::kScaledDot}) {
    ModelConfig on = small_model(type), off = on;
    off.attention.mask = false;
    torch::manual_seed(0);
    Seq2Seq a(on, 20, 20);
    torch::manual_seed(0);
    Seq2Seq b(off, 20, 20);
    a->eval();
    b->eval();
    torch::NoGradGuard ng;
    const PaddedBatch x = padded_batch();
    const auto oa = a->forward(x.src, x.len, x.mask, x.tgt_in), ob = b->forward(x.src, x.len, x.mask, x.tgt_in);
    // The full-length sentence (row 0) has no padding: the same logits and weights.
    EXPECT_TRUE(torch::allclose(oa.logits[0], ob.logits[0], 1e-6, 1e-6)) << to_string(type);
    EXPECT_TRUE(torch::allclose(oa.weights[0], ob.weights[0], 1e-6, 1e-6)) << to_string(type);
    // The short one: exactly 0 on its padding with the mask, more than 0 without, and its translation moves.
    EXPECT_EQ(oa.weights[1].slice(1, 2, 6).abs().sum().item<double>(), 0.0) << to_string(type);
    EXPECT_GT(ob.weights[1].slice(1, 2, 6).sum().item<double>(), 1e-3) << to_string(type);
    EXPECT_GT((oa.logits[1] - ob.logits[1]).abs().max().item<double>(), 1e-5) << to_string(type);
  }
}

TEST(LabKeys, ScaleAndMaskRefusedWhereTheyHaveNoEffect) {
  Config c;
  c.model.attention.type = AttentionType::kBahdanau;
  c.model.attention.scale = false;
  EXPECT_THROW(validate(c), UsageError);
  c.model.attention.type = AttentionType::kScaledDot;
  EXPECT_NO_THROW(validate(c));
  Config n;
  n.model.attention.type = AttentionType::kNone;
  n.model.attention.mask = false;
  EXPECT_THROW(validate(n), UsageError);
  n.model.attention.type = AttentionType::kLuong;
  EXPECT_NO_THROW(validate(n));
}

TEST(LabCounterfactual, UniformAndPermutedWeightsKeepPaddingAtZero) {
  ModelConfig m = small_model(AttentionType::kBahdanau);
  torch::manual_seed(0);
  Seq2Seq model(m, 20, 20);
  model->eval();
  const PaddedBatch x = padded_batch();
  torch::NoGradGuard ng;
  EncoderOutput enc = model->encode(x.src, x.len, x.mask);
  AttentionMemory mem = model->decoder->prepare(enc);
  AttentionImpl* att = model->decoder->attention();
  const torch::Tensor q = torch::randn({2, 3, 16});
  const AttentionOutput plain = att->attend(q, mem);
  att->edit_weights(uniform_weights);
  const AttentionOutput uni = att->attend(q, mem);
  att->edit_weights(PermutedWeights(3));
  const AttentionOutput perm = att->attend(q, mem);
  att->edit_weights(nullptr);
  const AttentionOutput back = att->attend(q, mem);
  ASSERT_EQ(uni.weights.sizes(), plain.weights.sizes());
  EXPECT_TRUE(torch::allclose(uni.weights[0], torch::full({3, 6}, 1.0 / 6)));
  EXPECT_TRUE(torch::allclose(uni.weights[1].slice(1, 0, 2), torch::full({3, 2}, 0.5)));
  EXPECT_EQ(uni.weights[1].slice(1, 2, 6).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(perm.weights[1].slice(1, 2, 6).abs().sum().item<double>(), 0.0);
  // A permutation: each row holds the same values, sorted, and at least one row is reordered.
  EXPECT_TRUE(torch::allclose(std::get<0>(perm.weights.sort(-1)), std::get<0>(plain.weights.sort(-1))));
  EXPECT_GT((perm.weights - plain.weights).abs().max().item<double>(), 1e-4);
  // The context follows the weights; switching back restores the model.
  EXPECT_GT((uni.context - plain.context).abs().max().item<double>(), 1e-5);
  EXPECT_TRUE(torch::equal(back.weights, plain.weights));
}

TEST(LabCounterfactual, ToyContentWordsAreNounsAdjectivesAndVerbs) {
  EXPECT_TRUE(toy_content_word_fr("chat"));
  EXPECT_TRUE(toy_content_word_fr("chevaux"));
  EXPECT_FALSE(toy_content_word_fr("le"));
  EXPECT_FALSE(toy_content_word_fr("avec"));
  EXPECT_FALSE(toy_content_word_fr("."));
  EXPECT_FALSE(toy_content_word_fr("qui"));
}

TEST(LabCommand, UnknownExperimentAndBadBudgetsAreOneLineErrors) {
  const std::string out = test::temp_dir("lab_bad");
  auto r = test::run_cli("lab frobnicate --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("Valid options: bottleneck, scaling, masks, explanation, cost, heads, positions, causal, all"), std::string::npos) << r.output;
  r = test::run_cli("lab bottleneck --minutes 0 --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  r = test::run_cli("lab bottleneck --configs " + out + "/nowhere --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("not found"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/bottleneck/lab.json"));
}

// The fair-bottleneck experiment end to end on tiny configs: every run trained under the same budget, its figures in
// lab.json (what ended each run among them), the page and the lab's index with the computed finding.
TEST(LabCommand, BottleneckWritesFiguresPageAndIndex) {
  const std::string corpus = test::tiny_toy_corpus("lab_corpus", 64, 12, 12, 20);
  const std::string configs = test::temp_dir("lab_configs"), out = test::temp_dir("lab_out");
  for (const std::string type : {"none", "bahdanau"}) {
    Config c = test::tiny_config_for(corpus, out + "/unused", type);
    c.train.batch_size = 16;
    c.train.early_stopping.patience = 3;
    c.eval.buckets = {5, 10, 20};
    test::write_file(configs + "/" + type + ".json", config_to_json(c).dump(2));
  }
  auto r = test::run_cli("lab bottleneck --configs " + configs + " --out " + out + " --bottleneck-minutes 0.05 --patience 2");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_file(out + "/bottleneck/lab.json"));
  const auto& runs = j.at("figures").at("runs");
  ASSERT_EQ(runs.size(), 4u);
  const std::vector<int> hidden = {16, 32, 64, 16};
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].at("hidden_dim").get<int>(), hidden[i]) << i;
    const std::string ended = runs[i].at("ended_by").get<std::string>();
    EXPECT_TRUE(ended == "max_minutes" || ended == "early stopping") << ended;  // no epoch cap
    ASSERT_GE(runs[i].at("by_length").size(), 3u);  // buckets 1-5, 6-10, 11-20 (and 21- when a sentence is there)
    ASSERT_EQ(runs[i].at("by_length").size(), runs[0].at("by_length").size());
    EXPECT_LE(runs[i].at("train_minutes").get<double>(), 0.05 + 0.05);  // the budget, plus the last step and validation
  }
  EXPECT_LT(runs[0].at("parameters").get<int64_t>(), runs[1].at("parameters").get<int64_t>());
  EXPECT_LT(runs[1].at("parameters").get<int64_t>(), runs[2].at("parameters").get<int64_t>());
  // The finding quotes the figures it was computed from.
  const std::string finding = j.at("finding").get<std::string>();
  char bleu[32];
  std::snprintf(bleu, sizeof(bleu), "%.2f", runs[3].at("test_bleu").get<double>());
  EXPECT_NE(finding.find(std::string("reaches ") + bleu), std::string::npos) << finding;
  EXPECT_NE(finding.find(runs[0].at("ended_by").get<std::string>()), std::string::npos) << finding;
  const std::string page = test::read_file(out + "/bottleneck/index.html"), index = test::read_file(out + "/index.html");
  EXPECT_NE(page.find("bleu_by_length.svg"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/bottleneck/bleu_by_length.svg"));
  EXPECT_NE(index.find("bottleneck/index.html"), std::string::npos);
  EXPECT_NE(index.find("Not run yet: <code>attnmt lab scaling</code>"), std::string::npos);
  EXPECT_NE(index.find("1 of 8 experiments run"), std::string::npos);
  // A second run reuses the finished runs (the same configs) instead of training again.
  r = test::run_cli("lab bottleneck --configs " + configs + " --out " + out + " --bottleneck-minutes 0.05 --patience 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("lab: bottleneck/none_x4: reusing the finished run"), std::string::npos) << r.output;
}

// The self-attention experiments end to end on a tiny config: the position-free encoder's outputs for the two
// sentences of each probe pair are the same vectors reordered, and it translates the pairs alike, while the one with
// positions does not; the causal-mask experiment records both runs' curves and charts them.
TEST(LabCommand, PositionsAndCausalMaskOnATinyConfig) {
  const std::string corpus = test::tiny_toy_corpus("lab_sa_corpus", 64, 12, 12, 20);
  const std::string configs = test::temp_dir("lab_sa_configs"), out = test::temp_dir("lab_sa_out");
  Config c = test::tiny_config_for(corpus, out + "/unused", "scaled_dot");
  c.model.encoder.type = c.model.decoder.type = LayerType::kSelfAttention;
  c.model.encoder.heads = c.model.decoder.heads = 2;
  c.train.batch_size = 16;
  c.eval.buckets = {5, 10, 20};
  test::write_file(configs + "/self_attention.json", config_to_json(c).dump(2));
  auto r = test::run_cli("lab positions --configs " + configs + " --out " + out + " --minutes 0.05 --patience 2");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json p = nlohmann::json::parse(test::read_file(out + "/positions/lab.json"));
  const auto& runs = p.at("figures").at("runs");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].at("positions"), "none");
  EXPECT_EQ(runs[0].at("pairs").get<int64_t>(), kToyProbePairs);
  EXPECT_LT(runs[0].at("max_abs_difference_after_reordering").get<double>(), 1e-4);
  EXPECT_GT(runs[1].at("max_abs_difference_after_reordering").get<double>(), 1e-3);
  EXPECT_GE(runs[0].at("identical_translations").get<int64_t>(), kToyProbePairs * 95 / 100);  // float sums may break a tie
  EXPECT_NE(p.at("finding").get<std::string>().find(std::to_string(runs[0].at("identical_translations").get<int64_t>()) + " of the pairs"),
            std::string::npos);
  r = test::run_cli("lab causal --configs " + configs + " --out " + out + " --minutes 0.05 --patience 2");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json cm = nlohmann::json::parse(test::read_file(out + "/causal/lab.json"));
  const auto& cruns = cm.at("figures").at("runs");
  ASSERT_EQ(cruns.size(), 2u);
  EXPECT_TRUE(cruns[0].at("causal_mask").get<bool>());
  EXPECT_FALSE(cruns[1].at("causal_mask").get<bool>());
  for (const auto& run : cruns) {
    ASSERT_GE(run.at("curve").size(), 1u);
    EXPECT_EQ(run.at("curve").size(), run.at("validations").get<size_t>());
  }
  EXPECT_EQ(cm.at("figures").at("early_stopping_metric"), "ppl");
  ASSERT_FALSE(cm.at("figures").at("same_step").is_null());  // both runs validate at their end of epoch 1 at least
  EXPECT_NE(cm.at("finding").get<std::string>().find("at step " + std::to_string(cm.at("figures").at("same_step").at("step").get<int64_t>())),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/causal/curves.svg"));
  EXPECT_NE(test::read_file(out + "/index.html").find("2 of 8 experiments run"), std::string::npos);
  // The trained runs say they were trained without the mask.
  EXPECT_NE(test::read_file(out + "/runs/sa_no_causal_mask/train.log").find("causal mask OFF"), std::string::npos);
}
