// What only a CUDA device shows: training, resume and checkpoints on it. Every test here skips with the reason where
// no device is visible (here, and in CI); scripts/gpu_check.sh runs the suite on a machine with one.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "common/runtime.h"
#include "data/batcher.h"
#include "support.h"

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

}  // namespace attnmt::cuda_test
