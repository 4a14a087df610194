// What only a CUDA device shows: training, resume and checkpoints on it. Every test here skips with the reason where
// no device is visible (here, and in CI); scripts/gpu_check.sh runs the suite on a machine with one.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "common/dispatch_count.h"
#include "common/runtime.h"
#include "data/batcher.h"
#include "model/seq2seq.h"
#include "support.h"
#include "translate/search.h"

namespace attnmt::cuda_test {

#define SKIP_WITHOUT_CUDA()                                                        \
  do {                                                                             \
    const std::string why = cuda_unavailable_reason();                             \
    if (!why.empty()) GTEST_SKIP() << why << " (scripts/gpu_check.sh runs these)"; \
  } while (0)

std::string config_file(const std::string& name, double dropout) {
  const std::string dir = test::temp_dir("cuda_" + name);
  const std::string corpus = test::tiny_toy_corpus("cuda_corpus_" + name, 300, 30, 30, 10);
  Config c = test::tiny_config_for(corpus, dir + "/run", "bahdanau");
  c.device = "cuda";
  c.model.dropout = dropout;
  c.train.epochs = 1000;
  c.train.batch_size = 8;
  c.train.valid_every = 10;
  c.train.max_steps = 20;
  return test::write_file(dir + "/c.json", config_to_json(c).dump(2));
}

double last_valid_loss(const std::string& run) {
  const auto rows = test::read_metrics(run);
  return rows.empty() ? std::nan("") : rows.back()["valid_loss"].get<double>();
}

TEST(Cuda, ResumeOnTheGpuFollowsTheUninterruptedRun) {
  SKIP_WITHOUT_CUDA();
  const std::string cfg = config_file("resume", 0.2);  // dropout on: the CUDA generator's state must come back
  const std::string dir = std::filesystem::path(cfg).parent_path().string();
  ASSERT_EQ(test::run_cli("--device cuda train -c " + cfg + " --set run_dir=" + dir + "/whole").code, 0);
  ASSERT_EQ(test::run_cli("--device cuda train -c " + cfg + " --set run_dir=" + dir + "/split --set train.max_steps=10").code, 0);
  const auto r = test::run_cli("--device cuda train -c " + cfg + " --set run_dir=" + dir + "/split --resume");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("start afresh"), std::string::npos) << r.output;
  const double a = last_valid_loss(dir + "/whole"), b = last_valid_loss(dir + "/split");
  EXPECT_NEAR(b, a, 1e-5 * std::abs(a));
}

TEST(Cuda, AGpuCheckpointLoadsOnTheCpuAndACpuOneOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  const std::string cfg = config_file("devices", 0.0);
  const std::string dir = std::filesystem::path(cfg).parent_path().string();
  ASSERT_EQ(test::run_cli("--device cuda train -c " + cfg + " --set run_dir=" + dir + "/gpu").code, 0);
  const auto on_cpu = test::run_cli("--device cpu evaluate --run " + dir + "/gpu");
  EXPECT_EQ(on_cpu.code, 0) << on_cpu.output;
  EXPECT_NE(on_cpu.output.find("BLEU"), std::string::npos) << on_cpu.output;
  ASSERT_EQ(test::run_cli("--device cpu train -c " + cfg + " --set run_dir=" + dir + "/cpu --set train.max_steps=10").code, 0);
  const auto on_gpu = test::run_cli("--device cuda train -c " + cfg + " --set run_dir=" + dir + "/cpu --resume");
  EXPECT_EQ(on_gpu.code, 0) << on_gpu.output;
  EXPECT_EQ(test::read_metrics(dir + "/cpu").size(), 2u);
}

TEST(Cuda, TheFirstStepsLossMatchesTheCpus) {
  SKIP_WITHOUT_CUDA();
  const std::string cfg = config_file("first", 0.0);
  const std::string dir = std::filesystem::path(cfg).parent_path().string();
  for (const std::string d : {"cuda", "cpu"})
    ASSERT_EQ(test::run_cli("--device " + d + " train -c " + cfg + " --set run_dir=" + dir + "/" + d +
                            " --set train.max_steps=1 --set train.valid_every=1").code,
              0);
  const auto g = test::read_metrics(dir + "/cuda"), c = test::read_metrics(dir + "/cpu");
  ASSERT_EQ(g.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  const double a = g[0]["train_loss"].get<double>(), b = c[0]["train_loss"].get<double>();
  EXPECT_NEAR(a, b, 1e-4 * std::abs(b));
}

// TF32 and bf16 on the GPU: the first step's loss within 3% of the CPU's float32 one, and each run's log names its
// precision and the TF32 switches (bf16's forward runs under autocast; tests/test_precision.cpp checks it on the CPU).
TEST(Cuda, Tf32AndBf16TrainNearFloat32) {
  SKIP_WITHOUT_CUDA();
  const std::string cfg = config_file("precision", 0.0);
  const std::string dir = std::filesystem::path(cfg).parent_path().string();
  for (const std::string p : {"fp32", "tf32", "bf16"}) {
    const std::string d = p == "fp32" ? "cpu" : "cuda";
    ASSERT_EQ(test::run_cli("--device " + d + " --precision " + p + " train -c " + cfg + " --set run_dir=" + dir + "/" + p +
                            " --set train.max_steps=1 --set train.valid_every=1").code,
              0) << p;
  }
  const double cpu = test::read_metrics(dir + "/fp32").at(0)["train_loss"].get<double>();
  for (const std::string p : {"tf32", "bf16"}) {
    const auto m = test::read_metrics(dir + "/" + p);
    ASSERT_EQ(m.size(), 1u) << p;
    EXPECT_NEAR(m[0]["train_loss"].get<double>(), cpu, 0.03 * std::abs(cpu)) << p;
    EXPECT_NE(test::read_file(dir + "/" + p + "/train.log").find("precision: " + p + " (float32 products in TF32 on CUDA: yes"),
              std::string::npos) << p;
  }
}

// A batch already on the device goes on as it is (bench's timed steps hand the trainer such a batch; sending it
// again failed on the first GPU run: "to_device: a host tensor expected").
TEST(Cuda, ABatchAlreadyOnTheDeviceStaysWhereItIs) {
  SKIP_WITHOUT_CUDA();
  const std::vector<EncodedPair> data = {{{5, 6, 7}, {8, 9}}, {{5, 6}, {8, 9, 10}}};
  const Batch host = make_batch(data, {0, 1});
  const torch::Device cuda(torch::kCUDA, 0);
  const Batch once = host.to(cuda);
  ASSERT_TRUE(once.src.is_cuda());
  const Batch twice = once.to(cuda);
  EXPECT_TRUE(twice.src.is_same(once.src));
  EXPECT_TRUE(twice.tgt_out.is_same(once.tgt_out));
}

// Greedy search with the decoder step recorded as a CUDA graph (common/cuda_graph.h) finds what the same search finds
// launching each operation on its own, for every RNN decoder, and the host dispatches fewer operations for it (the
// graph's steps dispatch none: a longer search costs no more operations than a shorter one).
TEST(Cuda, GreedyWithTheStepAsACudaGraphEqualsEagerGreedy) {
  SKIP_WITHOUT_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  const std::vector<std::vector<int64_t>> srcs = {{5, 6, 7, 8, 9}, {10, 11}, {12, 13, 14, 15, 16, 17, 18}, {19, 20, 21}};
  const Batch batch = make_src_batch(srcs, {0, 1, 2, 3});
  struct Kind {
    const char* attention;
    RnnCell cell;
    bool feeding;
  };
  size_t tokens_found = 0;  // a random model may end a sentence at once (<eos> first); not all of them
  for (const Kind k : {Kind{"bahdanau", RnnCell::kGru, false}, Kind{"luong", RnnCell::kGru, true},
                       Kind{"luong", RnnCell::kLstm, false}, Kind{"scaled_dot", RnnCell::kGru, false},
                       Kind{"none", RnnCell::kLstm, false}}) {
    const std::string what = std::string(k.attention) + (k.cell == RnnCell::kLstm ? " lstm" : " gru") +
                             (k.feeding ? " input feeding" : "");
    ModelConfig m;
    m.embed_dim = 8;
    m.hidden_dim = 16;
    m.dropout = 0.0;
    m.rnn = k.cell;
    m.input_feeding = k.feeding;
    m.attention.type = attention_type_from_string(k.attention);
    torch::manual_seed(11);
    Seq2Seq model(m, 30, 30);
    model->to(cuda);
    model->eval();
    SearchOptions graphed;
    graphed.stop_at_eos = false;
    SearchOptions eager = graphed;
    eager.cuda_graph = false;
    ASSERT_TRUE(greedy_step_graphed(model, graphed, cuda)) << what;
    ASSERT_FALSE(greedy_step_graphed(model, eager, cuda)) << what;
    const auto a = greedy_search(model, batch, graphed, cuda), b = greedy_search(model, batch, eager, cuda);
    ASSERT_EQ(a.size(), 4u) << what;
    ASSERT_EQ(b.size(), 4u) << what;
    for (size_t i = 0; i < a.size(); ++i) {
      tokens_found += a[i].tokens.size();
      EXPECT_EQ(a[i].tokens, b[i].tokens) << what << ", sentence " << i;
      EXPECT_NEAR(a[i].logprob, b[i].logprob, 1e-5 * std::abs(b[i].logprob) + 1e-6) << what << ", sentence " << i;
    }
    const auto ops = [&](const SearchOptions& base, double ratio) {
      SearchOptions o = base;
      o.max_len_ratio = ratio;
      const DispatchCounter counter;
      greedy_search(model, batch, o, cuda);
      return counter.count().dispatched_ops;
    };
    const int64_t graph_short = ops(graphed, 0.0), graph_long = ops(graphed, 4.0);
    const int64_t eager_short = ops(eager, 0.0), eager_long = ops(eager, 4.0);
    EXPECT_EQ(graph_long, graph_short) << what << ": a replayed step dispatches no operation";
    EXPECT_GT(eager_long - eager_short, 10 * 20) << what << ": 28 more steps of a dozen operations and more each";
  }
  EXPECT_GT(tokens_found, 20u);
}

}  // namespace attnmt::cuda_test
