// What a step dispatches and reads back (common/dispatch_count.h, common/host.h): the counts are right on graphs
// counted by hand, and no code outside src/kernels/ reads tensor memory but through common/host.h.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <numeric>

#include "common/dispatch_count.h"
#include "common/host.h"
#include "data/batcher.h"
#include "translate/search.h"
#include "kernels/mode.h"
#include "model/seq2seq.h"
#include "train/trainer.h"
#include "support.h"

namespace attnmt::dispatch_test {

namespace fs = std::filesystem;

TEST(DispatchCount, CountsTopLevelOperationsLessViewsAsCountedByHand) {
  const torch::Tensor x = torch::ones({2, 3}), w = torch::ones({3, 4}), w2 = torch::ones({5, 4}), b = torch::zeros({5});
  DispatchCounter counter(/*by_name=*/true);
  const torch::Tensor y = torch::mm(x, w);         // mm: 1
  const torch::Tensor z = torch::tanh(y);          // tanh: 1
  const torch::Tensor v = z.view({8});             // a view: a root operation, not dispatched
  const torch::Tensor t = z.t();                   // a view
  const torch::Tensor l = torch::linear(z, w2, b); // linear: 1 (its addmm and transpose run inside it)
  const torch::Tensor s = torch::softmax(l, -1);   // softmax: 1 (its _softmax runs inside it)
  const DispatchCount c = counter.count();
  EXPECT_EQ(c.dispatched_ops, 4);
  EXPECT_EQ(c.root_aten_ops, 6);
  EXPECT_EQ(c.host_reads, 0);
  const auto names = counter.by_name();
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names.at("mm"), 1);
  EXPECT_EQ(names.at("tanh"), 1);
  EXPECT_EQ(names.at("linear"), 1);
  EXPECT_EQ(names.at("softmax"), 1);
  EXPECT_EQ(names.count("addmm"), 0u) << "an operation called inside another is not counted";
}

TEST(DispatchCount, CountsTheBackwardPassOperations) {
  const torch::Tensor a = torch::ones({3}, torch::requires_grad()), b = torch::full({3}, 2.0, torch::requires_grad());
  const torch::Tensor y = (a * b).sum();
  DispatchCounter counter(/*by_name=*/true);
  y.backward();
  // MulBackward0 computes both inputs' gradients, each a mul of its own (not nested in any ATen operation).
  const auto names = counter.by_name();
  ASSERT_EQ(names.count("mul"), 1u);
  EXPECT_EQ(names.at("mul"), 2);
  EXPECT_GE(counter.count().dispatched_ops, 2);
  EXPECT_TRUE(torch::allclose(a.grad(), torch::full({3}, 2.0)));
}

TEST(DispatchCount, OneCounterAtATime) {
  DispatchCounter first;
  EXPECT_THROW(DispatchCounter second, c10::Error);
}

TEST(HostReads, EachReadThroughTheHelperCountsOnce) {
  const torch::Tensor t = torch::arange(6, torch::kLong).view({2, 3});
  DispatchCounter counter;
  EXPECT_EQ(host_scalar<double>(t.sum()), 15.0);
  const std::vector<int64_t> v = host_vector<int64_t>(t);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[4], 4);
  const HostTensor h = to_host(t.t(), torch::kFloat);  // made contiguous on the way
  ASSERT_EQ(h.numel(), 6);
  EXPECT_EQ(h.values<float>(0, 3), (std::vector<float>{0, 3, 1}));
  EXPECT_EQ(counter.count().host_reads, 3);
  // Values that live on the host by design are no read.
  EXPECT_EQ(cpu_vector<int64_t>(t).size(), 6u);
  EXPECT_EQ(counter.count().host_reads, 3);
}

// The lines of a source text that read tensor memory directly: data_ptr, accessor, item.
std::vector<std::string> direct_reads(std::istream& in) {
  const std::regex read(R"((\bdata_ptr\s*<|\bdata_ptr\s*\(|\baccessor\s*<|\.item\s*<|\.item\s*\(|->item\s*<))");
  std::vector<std::string> hits;
  for (std::string line; std::getline(in, line);) {
    const std::string code = line.substr(0, line.find("//"));
    if (std::regex_search(code, read)) hits.push_back(line);
  }
  return hits;
}

TEST(HostReads, TheScanFindsEveryKindOfDirectRead) {
  std::istringstream text(
      "double a = t.item<double>();\n"
      "auto b = t.item();\n"
      "float* p = t.data_ptr<float>();\n"
      "auto acc = t.accessor<float, 2>();\n"
      "// a comment that names data_ptr<float>() is no read\n"
      "auto fine = host_scalar<double>(t);\n");
  EXPECT_EQ(direct_reads(text).size(), 4u);
}

TEST(HostReads, NoCodeOutsideKernelsReadsTensorMemoryButThroughTheHelper) {
  const fs::path root = test::source_dir();
  int files = 0;
  for (const char* dir : {"src", "apps"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const fs::path& f = e.path();
      if (!e.is_regular_file() || (f.extension() != ".cpp" && f.extension() != ".h")) continue;
      ++files;
      if (f.parent_path().filename() == "kernels" || f == root / "src" / "common" / "host.h") continue;
      std::ifstream in(f);
      for (const std::string& line : direct_reads(in))
        ADD_FAILURE() << f << " reads tensor memory directly (use common/host.h: to_host, host_vector, host_scalar): " << line;
    }
  EXPECT_GT(files, 100);
}

}  // namespace attnmt::dispatch_test

namespace attnmt::dispatch_test_models {

// The device path (--kernels reference runs it on the CPU) of a Bahdanau model, pinned: a training step dispatches few
// operations per target position and reads nothing back; a greedy decoder step likewise. The bounds are this design's
// counts with a little room (docs/performance.md gives the benchmark model's beside the PyTorch-Python peer's): a
// change that puts per-step operations back into the recurrences, or a read into the step, fails here.
namespace {
struct CountedModel {
  double train_ops_per_position = 0, greedy_ops_per_step = 0;
  int64_t train_reads = 0, greedy_reads = 0;
};
ModelConfig bahdanau_model() {
  ModelConfig m;
  m.rnn = RnnCell::kGru;
  m.embed_dim = 16;
  m.hidden_dim = 32;
  m.bidirectional = true;
  m.dropout = 0.1;
  m.attention.type = AttentionType::kBahdanau;
  return m;
}
CountedModel count_under_reference(const ModelConfig& m) {
  const ScopedKernelMode mode(KernelMode::kReference);
  torch::manual_seed(4);
  Seq2Seq model(m, 60, 60);
  TrainConfig tc;
  tc.lr = 1e-3;
  tc.clip_norm = 1.0;
  Trainer trainer(model, tc, torch::kCPU, TrainOptions{});
  std::vector<EncodedPair> data;
  for (int i = 0; i < 8; ++i) {
    std::vector<int64_t> s, t;
    for (int k = 0; k < 20 + i % 5; ++k) s.push_back(4 + (i * 7 + k * 3) % 56);
    for (int k = 0; k < 19 + i % 6; ++k) t.push_back(4 + (i * 5 + k * 11) % 56);
    data.push_back({s, t});
  }
  std::vector<int64_t> all(data.size());
  std::iota(all.begin(), all.end(), 0);
  const Batch batch = make_batch(data, all);
  trainer.step(&batch, batch.tgt_tokens);  // the optimizer's state is made in the first step
  CountedModel c;
  {
    DispatchCounter counter;
    trainer.step(&batch, batch.tgt_tokens);
    const DispatchCount n = counter.count();
    c.train_ops_per_position = static_cast<double>(n.dispatched_ops) / static_cast<double>(batch.tgt_out.size(1));
    c.train_reads = n.host_reads;
  }
  model->eval();
  std::vector<std::vector<int64_t>> srcs;
  for (const auto& d : data) srcs.push_back(d.src);
  const Batch src = make_src_batch(srcs, all);
  auto greedy = [&](double ratio) {
    SearchOptions so;
    so.max_len_ratio = ratio;
    so.stop_at_eos = false;
    DispatchCounter counter;
    greedy_search(model, src, so, torch::kCPU);
    return counter.count();
  };
  const DispatchCount longer = greedy(1.0), shorter = greedy(0.0);  // 10 + source length steps, and 10
  const double steps = static_cast<double>(24 + 10 - 10);  // the longest source has 24 tokens
  c.greedy_ops_per_step = static_cast<double>(longer.dispatched_ops - shorter.dispatched_ops) / steps;
  c.greedy_reads = longer.host_reads - shorter.host_reads;
  return c;
}
}  // namespace

TEST(DispatchCount, TheDevicePathOfABahdanauModelDispatchesLittleAndReadsNothingInItsSteps) {
  const CountedModel c = count_under_reference(bahdanau_model());
  std::printf("reference path: %.1f operations per target position a training step, %.1f per greedy step\n",
              c.train_ops_per_position, c.greedy_ops_per_step);
  EXPECT_EQ(c.train_reads, 0);
  EXPECT_EQ(c.greedy_reads, 0);
  EXPECT_LE(c.train_ops_per_position, 40.0);
  EXPECT_GE(c.train_ops_per_position, 20.0);  // the recurrences' own operations: a count of nothing would be wrong too
  EXPECT_LE(c.greedy_ops_per_step, 18.0);
  EXPECT_GE(c.greedy_ops_per_step, 8.0);
}

// The self-attention encoder-decoder's device path: a decoder step writes its keys and values into the cache in place,
// takes its positions from a table made once, builds no mask for itself (one new position sees the whole prefix) and,
// under a LibTorch with the fused attention (2.1+), runs each attention as that one operation. Two layers a side.
TEST(DispatchCount, TheDevicePathOfASelfAttentionModelDispatchesLittleAndReadsNothingInItsSteps) {
  ModelConfig m = bahdanau_model();
  m.encoder.type = m.decoder.type = LayerType::kSelfAttention;
  m.encoder.heads = m.decoder.heads = m.attention.heads = 2;
  m.attention.type = AttentionType::kScaledDot;
  m.encoder_layers = m.decoder_layers = 2;
  m.embed_dim = 32;
  const CountedModel c = count_under_reference(m);
  std::printf("reference path: %.1f operations per target position a training step, %.1f per greedy step (%s)\n",
              c.train_ops_per_position, c.greedy_ops_per_step, fused_attention_available() ? "fused attention" : "explicit attention");
  EXPECT_EQ(c.train_reads, 0);
  EXPECT_EQ(c.greedy_reads, 0);
  // A decoder layer's step: 3 layer norms, 6 projections, 2 cache writes, 2 attentions, 2 feed-forward products and
  // their relu, 3 residual additions (18) plus each attention's own operations: 1 fused, 4-5 explicit.
  const double per_layer = fused_attention_available() ? 20.0 : 28.0;
  EXPECT_LE(c.greedy_ops_per_step, 2 * per_layer + 6.0);
  EXPECT_GE(c.greedy_ops_per_step, 2 * 18.0);
}

}  // namespace attnmt::dispatch_test_models
