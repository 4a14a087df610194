// `attnmt bench` (apps/cmd_bench.cpp, apps/bench_rows.cpp): its JSON figures are present and consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "kernels/packed_product.h"
#include "support.h"

using namespace attnmt;

namespace {

// A tiny Bahdanau model over a toy corpus: bench reads the model's dimensions and makes up its own batch.
Config bench_config(const std::string& dir) {
  Config c = test::tiny_config_for(test::tiny_toy_corpus("bench_corpus", 16, 4, 4, 10), dir + "/run", "bahdanau");
  validate(c);
  return c;
}

// The first row's parameter count from `attnmt bench -c CONFIG --attention self_attention --json` on a tiny batch
// (-1, with a test failure, where bench fails or prints no JSON).
int64_t self_attention_row_parameters(const std::string& config) {
  auto r = test::run_cli("--log-level warn bench -c " + config + " --attention self_attention --steps 1 --batch 4 --vocab 40 --json");
  EXPECT_EQ(r.code, 0) << r.output;
  const size_t start = r.output.find('{');
  EXPECT_NE(start, std::string::npos) << r.output;
  if (r.code != 0 || start == std::string::npos) return -1;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  EXPECT_EQ(j.at("rows").size(), 1u);
  return j.at("rows").at(0).at("parameters").get<int64_t>();
}

}  // namespace

TEST(Bench, JsonFiguresAreConsistent) {
  // A tiny model through `attnmt bench --json`: every figure present and positive, the per-row roofline's
  // mean never above its best sample (the best is the MFU denominator), MFU = GFLOP/s over that roofline, and
  // the beam ratio the quotient of the two beam rates.
  const std::string dir = testing::TempDir() + "/bench_json";
  std::filesystem::create_directories(dir);
  test::write_file(dir + "/model.json", config_to_json(bench_config(dir)).dump(2));
  auto r = test::run_cli("--log-level warn bench -c " + dir + "/model.json --attention bahdanau --steps 2 --batch 8 --vocab 40 "
                         "--json");
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t start = r.output.find('{');
  ASSERT_NE(start, std::string::npos) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  EXPECT_GT(j.at("matmul_gflops").get<double>(), 0);
  EXPECT_GT(j.at("output_layer_gflops_5_rows").get<double>(), 0);
  EXPECT_GT(j.at("output_layer_gflops_80_rows").get<double>(), 0);
  // The packed products decoding runs: measured where the CPU runs them, 0 (not used) elsewhere.
  for (const char* k : {"output_layer_packed_gflops_5_rows", "output_layer_packed_gflops_80_rows"}) {
    if (PackedLinear::available()) EXPECT_GT(j.at(k).get<double>(), 0) << k;
    else EXPECT_EQ(j.at(k).get<double>(), 0) << k;
  }
  EXPECT_GT(j.at("peak_rss_mb").get<double>(), 0);
  // The roofline is the faster of the BLAS's 1024^3 product and the packed kernel's (0 where it does not run).
  EXPECT_GT(j.at("matmul_gflops_blas").get<double>(), 0);
  if (PackedLinear::available()) EXPECT_GT(j.at("matmul_gflops_packed").get<double>(), 0);
  else EXPECT_EQ(j.at("matmul_gflops_packed").get<double>(), 0);
  EXPECT_EQ(j["matmul_gflops"].get<double>(), std::max(j["matmul_gflops_blas"].get<double>(), j["matmul_gflops_packed"].get<double>()));
  EXPECT_EQ(j.at("training_products").get<std::string>(), product_kernel_choice());
  EXPECT_EQ(j.at("kernels").get<std::string>(), "auto");
  // Under --kernels reference bench says so, and still measures the machine's best product rate.
  auto ref = test::run_cli("--log-level warn --kernels reference bench -c " + dir + "/model.json --attention bahdanau --steps 2 "
                           "--batch 8 --vocab 40 --json");
  ASSERT_EQ(ref.code, 0) << ref.output;
  ASSERT_NE(ref.output.find('{'), std::string::npos) << ref.output;
  const nlohmann::json jr = nlohmann::json::parse(ref.output.substr(ref.output.find('{')));
  EXPECT_EQ(jr.at("kernels").get<std::string>(), "reference");
  EXPECT_NE(jr.at("kernel_choice").get<std::string>().find("plain LibTorch operations"), std::string::npos);
  EXPECT_NE(jr.at("training_products").get<std::string>().find("--kernels reference"), std::string::npos);
  if (PackedLinear::available()) {
    EXPECT_GT(jr.at("matmul_gflops_packed").get<double>(), 0);
  }
  ASSERT_EQ(jr.at("rows").size(), 1u);
  EXPECT_GT(jr["rows"][0].at("train_tokens_per_s").get<double>(), 0);
  // The CPU's theoretical peak is the product of its stated factors, and the roofline's share of it follows.
  const auto& peak = j.at("cpu_peak");
  const double product = peak.at("cores").get<double>() * peak.at("lanes").get<double>() * peak.at("fma_units").get<double>() * 2 *
                         peak.at("clock_ghz").get<double>();
  EXPECT_GT(product, 0);
  EXPECT_NEAR(peak.at("gflops").get<double>(), product, 1e-9 * product);
  EXPECT_NEAR(peak.at("roofline_share").get<double>(), j["matmul_gflops"].get<double>() / product, 1e-9);
  EXPECT_NE(peak.at("derivation").get<std::string>().find("GFLOP/s"), std::string::npos);
  ASSERT_EQ(j.at("rows").size(), 1u);
  const auto& row = j["rows"][0];
  EXPECT_EQ(row.at("attention").get<std::string>(), "bahdanau");
  const double roof = row.at("matmul_gflops").get<double>(), mean = row.at("matmul_gflops_mean").get<double>();
  EXPECT_GT(mean, 0);
  EXPECT_LE(mean, roof * (1 + 1e-9));
  EXPECT_NEAR(row.at("train_mfu").get<double>(), row.at("train_gflops").get<double>() / roof, 1e-9);
  for (const char* k : {"train_tokens_per_s", "train_flops_per_step", "greedy_sentences_per_s", "greedy_mfu",
                        "beam5_batched_sentences_per_s", "beam5_single_sentences_per_s", "beam5_batched_mfu", "beam5_single_mfu"})
    EXPECT_GT(row.at(k).get<double>(), 0) << k;
  // Greedy runs 30 decoder steps, as the Python peer does.
  EXPECT_EQ(row.at("greedy_steps").get<int64_t>(), 30);
  EXPECT_NEAR(row.at("beam5_batched_speedup").get<double>(),
              row["beam5_batched_sentences_per_s"].get<double>() / row["beam5_single_sentences_per_s"].get<double>(), 1e-9);
}

TEST(Bench, SelfAttentionRowKeepsASelfAttentionConfigsLayersAndHeads) {
  // `bench -c` with a self-attention config benchmarks that model: one layer a side and two heads here, not the
  // 3 layers of 8 heads its self_attention row puts on an RNN config. One layer more a side adds its parameters.
  const std::string dir = testing::TempDir() + "/bench_sa";
  std::filesystem::create_directories(dir);
  Config c = bench_config(dir);
  c.model.encoder.type = c.model.decoder.type = LayerType::kSelfAttention;
  c.model.encoder.heads = c.model.decoder.heads = 2;
  c.model.attention.type = attention_type_from_string("scaled_dot");
  c.model.attention.heads = 2;
  auto parameters_with = [&](const std::string& name, int layers) {
    c.model.encoder_layers = c.model.decoder_layers = layers;
    validate(c);
    const std::string path = dir + "/" + name + ".json";
    test::write_file(path, config_to_json(c).dump(2));
    return self_attention_row_parameters(path);
  };
  const int64_t one = parameters_with("sa1", 1), two = parameters_with("sa2", 2);
  ASSERT_GT(one, 0);
  EXPECT_GT(two, one);
  // The same config as an RNN model gets the row's own 3 layers a side, more than either.
  c.model.encoder.type = c.model.decoder.type = LayerType::kRnn;
  c.model.encoder.heads = c.model.decoder.heads = ModelConfig{}.encoder.heads;
  EXPECT_GT(parameters_with("rnn", 1), two);
}

TEST(Bench, TextOutputShowsWhatTheJsonDoes) {
  // The text table is printed from the same figures as --json: the row's parameter count to the unit, the matmul rate
  // and the peak memory within what two runs of one tiny bench may differ by (a printf once read a struct where a
  // double was due and printed 500 GFLOP/s and a million MB for 30 and 300).
  const std::string dir = testing::TempDir() + "/bench_text";
  std::filesystem::create_directories(dir);
  test::write_file(dir + "/model.json", config_to_json(bench_config(dir)).dump(2));
  const std::string args = "--log-level warn bench -c " + dir + "/model.json --attention bahdanau --steps 2 --batch 8 --vocab 40";
  auto js = test::run_cli(args + " --json");
  ASSERT_EQ(js.code, 0) << js.output;
  ASSERT_NE(js.output.find('{'), std::string::npos) << js.output;
  const nlohmann::json j = nlohmann::json::parse(js.output.substr(js.output.find('{')));
  auto tx = test::run_cli(args);
  ASSERT_EQ(tx.code, 0) << tx.output;
  double gflops = -1, rss = -1;
  const size_t m = tx.output.find("matmul 1024^3 float32: ");
  ASSERT_NE(m, std::string::npos) << tx.output;
  ASSERT_EQ(std::sscanf(tx.output.c_str() + m, "matmul 1024^3 float32: %lf GFLOP/s; peak RSS %lf MB", &gflops, &rss), 2) << tx.output;
  const double j_gflops = j.at("matmul_gflops").get<double>(), j_rss = j.at("peak_rss_mb").get<double>();
  EXPECT_GT(gflops, j_gflops / 4) << tx.output;
  EXPECT_LT(gflops, j_gflops * 4) << tx.output;
  EXPECT_GT(rss, j_rss / 2) << tx.output;
  EXPECT_LT(rss, j_rss * 2) << tx.output;
  const size_t row = tx.output.find("\nbahdanau ");
  ASSERT_NE(row, std::string::npos) << tx.output;
  long long params = -1;
  ASSERT_EQ(std::sscanf(tx.output.c_str() + row + 1, "bahdanau %lld", &params), 1) << tx.output;
  ASSERT_EQ(j.at("rows").size(), 1u);
  EXPECT_EQ(params, j["rows"][0].at("parameters").get<long long>());
}
