// Precision (common/precision.h): the names, the TF32 switches, autocast regions, and bf16 through every model kind on
// the CPU: products in bfloat16, parameters, gradients, optimizer state and loss in float32, the loss near float32's.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/Context.h>

#include "common/config.h"
#include "common/errors.h"
#include "common/precision.h"
#include "data/batcher.h"
#include "kernels/mode.h"
#include "model/loss.h"
#include "model/seq2seq.h"
#include "train/trainer.h"
#include "translate/search.h"

namespace attnmt::precision_test {

namespace {
const torch::Device kCpu(torch::kCPU);

struct Kind {
  std::string name;
  ModelConfig m;
};

// Every decoder path a model can take: the fixed context, the one-node Bahdanau recurrence, the stepped one (LSTM),
// Luong with input feeding (token by token), scaled dot-product over all steps, and self-attention both sides.
std::vector<Kind> kinds() {
  ModelConfig base;
  base.embed_dim = 8;
  base.hidden_dim = 16;
  base.dropout = 0.0;  // the two precisions' passes must see the same network
  std::vector<Kind> k;
  auto add = [&](const std::string& name, auto&& change) {
    ModelConfig m = base;
    change(m);
    k.push_back({name, m});
  };
  add("none", [](ModelConfig& m) { m.attention.type = AttentionType::kNone; });
  add("bahdanau", [](ModelConfig& m) { m.attention.type = AttentionType::kBahdanau; });
  add("bahdanau lstm", [](ModelConfig& m) {
    m.attention.type = AttentionType::kBahdanau;
    m.rnn = RnnCell::kLstm;
  });
  add("luong general, input feeding", [](ModelConfig& m) {
    m.attention.type = AttentionType::kLuong;
    m.attention.score = LuongScore::kGeneral;
    m.input_feeding = true;
  });
  add("scaled_dot, 2 heads", [](ModelConfig& m) {
    m.attention.type = AttentionType::kScaledDot;
    m.attention.heads = 2;
  });
  add("self-attention", [](ModelConfig& m) {
    m.hidden_dim = 12;
    m.encoder.type = LayerType::kSelfAttention;
    m.decoder.type = LayerType::kSelfAttention;
    m.encoder.heads = 2;
    m.decoder.heads = 3;
    m.attention.type = AttentionType::kScaledDot;
    m.attention.heads = 2;
  });
  return k;
}

std::vector<EncodedPair> pairs() {
  std::vector<EncodedPair> data;
  for (int i = 0; i < 6; ++i) {
    std::vector<int64_t> s, t;
    for (int k = 0; k < 5 + i; ++k) s.push_back(4 + (i * 7 + k * 3) % 36);
    for (int k = 0; k < 4 + (i * 2) % 5; ++k) t.push_back(4 + (i * 5 + k * 11) % 36);
    data.push_back({s, t});
  }
  return data;
}

std::vector<int64_t> all_rows(size_t n) {
  std::vector<int64_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}
}  // namespace

TEST(Precision, NamesParseAndOthersAreRefused) {
  for (const char* name : {"fp32", "tf32", "bf16"}) {
    Precision p = Precision::kFp32;
    ASSERT_TRUE(parse_precision(name, &p)) << name;
    EXPECT_STREQ(precision_name(p), name);
  }
  Precision p = Precision::kTf32;
  for (const char* bad : {"fp16", "BF16", "", "float32"}) EXPECT_FALSE(parse_precision(bad, &p)) << bad;
  EXPECT_EQ(p, Precision::kTf32);  // left as it was
}

TEST(Precision, Tf32SwitchesFollowThePrecisionAndComeBack) {
  const ScopedPrecision outer(Precision::kFp32);
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  EXPECT_FALSE(at::globalContext().allowTF32CuDNN());  // LibTorch's own default is on: fp32 turns it off
  for (Precision p : {Precision::kTf32, Precision::kBf16}) {
    const ScopedPrecision inner(p);
    const PrecisionState s = precision_state();
    EXPECT_EQ(s.precision, precision_name(p));
    EXPECT_TRUE(s.cuda_tf32) << s.precision;
    EXPECT_TRUE(s.cudnn_tf32) << s.precision;
  }
  EXPECT_EQ(precision(), Precision::kFp32);
  EXPECT_FALSE(precision_state().cuda_tf32);
  EXPECT_FALSE(precision_state().cudnn_tf32);
}

TEST(Precision, OnlyBf16OpensAutocastRegionsAndTheyNest) {
  const ScopedKernelMode kernels(KernelMode::kAuto);
  const torch::Tensor x = torch::randn({4, 8});
  {
    const ScopedPrecision p(Precision::kFp32);
    const Autocast region(kCpu);
    EXPECT_FALSE(autocast_on(kCpu));
    EXPECT_TRUE(kernels_on(kCpu));
    EXPECT_EQ(torch::mm(x, x.t()).scalar_type(), torch::kFloat);
  }
  const ScopedPrecision p(Precision::kBf16);
  EXPECT_FALSE(autocast_on(kCpu));  // nothing until a region opens
  {
    const Autocast outer(kCpu);
    EXPECT_TRUE(autocast_on(kCpu));
    EXPECT_FALSE(kernels_on(kCpu));  // the float32 kernels stand aside
    EXPECT_EQ(torch::mm(x, x.t()).scalar_type(), torch::kBFloat16);
    {
      const NoAutocast off(kCpu);
      EXPECT_FALSE(autocast_on(kCpu));
      EXPECT_EQ(torch::mm(x, x.t()).scalar_type(), torch::kFloat);
    }
    EXPECT_TRUE(autocast_on(kCpu));
    { const Autocast inner(kCpu); }
    EXPECT_TRUE(autocast_on(kCpu)) << "an inner region's end turned the outer one off";
  }
  EXPECT_FALSE(autocast_on(kCpu));
  EXPECT_TRUE(kernels_on(kCpu));
  EXPECT_EQ(float_if_reduced(x.to(torch::kBFloat16)).scalar_type(), torch::kFloat);
  EXPECT_TRUE(float_if_reduced(x).is_same(x));
  EXPECT_EQ(float_if_reduced(x.to(torch::kDouble)).scalar_type(), torch::kDouble);
}

// Each model kind: under bf16 the output layer's logits are bfloat16 (autocast reached the model), the loss is float32
// and within 3% of float32's on the same network and batch, every gradient is float32 and finite; two optimizer steps
// keep the parameters float32 and finite and lower the loss; greedy and beam search decode every sentence.
TEST(Precision, Bf16TrainsAndDecodesEveryModelKindInFloat32State) {
  const std::vector<EncodedPair> data = pairs();
  const std::vector<int64_t> rows = all_rows(data.size());
  const Batch batch = make_batch(data, rows);
  std::vector<std::vector<int64_t>> srcs;
  for (const auto& d : data) srcs.push_back(d.src);
  const Batch src = make_src_batch(srcs, rows);
  for (const Kind& k : kinds()) {
    SCOPED_TRACE(k.name);
    torch::manual_seed(5);
    Seq2Seq model(k.m, 40, 40);
    double fp32 = 0;
    {
      const ScopedPrecision p(Precision::kFp32);
      const BatchLoss l = batch_loss(model, batch, 0.1);
      ASSERT_EQ(l.out.logits.scalar_type(), torch::kFloat);
      fp32 = l.sum.item<double>();
    }
    const ScopedPrecision p(Precision::kBf16);
    model->zero_grad();
    const BatchLoss l = batch_loss(model, batch, 0.1);
    EXPECT_EQ(l.out.logits.scalar_type(), torch::kBFloat16);
    ASSERT_EQ(l.sum.scalar_type(), torch::kFloat);
    const double bf16 = l.sum.item<double>();
    EXPECT_TRUE(std::isfinite(bf16));
    EXPECT_NEAR(bf16, fp32, 0.03 * std::abs(fp32));
    l.sum.backward();
    int with_grad = 0;
    for (const auto& param : model->named_parameters()) {
      const torch::Tensor& g = param.value().grad();
      if (!g.defined()) continue;
      ++with_grad;
      EXPECT_EQ(g.scalar_type(), torch::kFloat) << param.key();
      EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << param.key();
    }
    EXPECT_GT(with_grad, 4);

    TrainConfig tc;
    tc.lr = 1e-2;
    Trainer trainer(model, tc, kCpu, TrainOptions{});
    const double first = trainer.step(&batch, batch.tgt_tokens).loss_sum;
    double last = first;
    for (int i = 0; i < 4; ++i) last = trainer.step(&batch, batch.tgt_tokens).loss_sum;
    EXPECT_LT(last, first);
    for (const auto& param : model->named_parameters()) {
      EXPECT_EQ(param.value().scalar_type(), torch::kFloat) << param.key();
      EXPECT_TRUE(torch::isfinite(param.value()).all().item<bool>()) << param.key();
    }

    model->eval();
    SearchOptions so;
    so.beam_size = 3;
    const std::vector<Hypothesis> greedy = greedy_search(model, src, so, kCpu);
    const std::vector<std::vector<Hypothesis>> beam = beam_search(model, src, so, kCpu);
    ASSERT_EQ(greedy.size(), data.size());
    ASSERT_EQ(beam.size(), data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      EXPECT_TRUE(std::isfinite(greedy[i].score)) << i;
      ASSERT_FALSE(beam[i].empty()) << i;
      EXPECT_TRUE(std::isfinite(beam[i][0].score)) << i;
    }
    model->train();
  }
}

TEST(Precision, TheConfigKeyTakesTheThreeNamesOnly) {
  EXPECT_EQ(config_from_json(nlohmann::json::object()).train.precision, "fp32");
  EXPECT_EQ(config_from_json(nlohmann::json::parse(R"({"train": {"precision": "bf16"}})")).train.precision, "bf16");
  try {
    config_from_json(nlohmann::json::parse(R"({"train": {"precision": "fp16"}})"));
    FAIL() << "fp16 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
  }
}

}  // namespace attnmt::precision_test
