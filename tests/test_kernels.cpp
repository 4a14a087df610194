// The kernel switch end to end (src/kernels/README.md): every model kind trained, decoded and mapped under
// --kernels auto and --kernels reference gives the same numbers, and resuming under reference is exact. The
// reference path is the one a CUDA device takes, so these tests cover on a CPU what a GPU run executes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "common/config.h"
#include "translate/translator.h"
#include "kernels/mode.h"
#include "model/decoder.h"
#include "support.h"
#include "train/trainer.h"

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
  for (const Kind& k : kinds()) {
    if (k.name != "bahdanau" && k.name != "luong_general_feeding") continue;
    const std::string straight = test::temp_dir("kernels_straight_" + k.name), split = test::temp_dir("kernels_split_" + k.name);
    Config c1 = config_for(k, straight);
    c1.train.max_steps = 8;  // crosses the epoch boundary (4 batches an epoch)
    train_under(KernelMode::kReference, c1);
    Config c2 = config_for(k, split);
    c2.train.max_steps = 3;
    train_under(KernelMode::kReference, c2);
    c2.train.max_steps = 8;
    TrainOptions resume;
    resume.resume = true;
    train_under(KernelMode::kReference, c2, resume);
    const auto m1 = metrics(straight), m2 = metrics(split);
    ASSERT_EQ(m1.size(), 8u) << k.name;
    ASSERT_EQ(m2.size(), m1.size()) << k.name;
    for (size_t i = 0; i < m1.size(); ++i) {
      EXPECT_EQ(m1[i]["step"], m2[i]["step"]);
      for (const char* key : {"train_loss", "valid_loss", "valid_bleu"})
        EXPECT_EQ(m1[i][key], m2[i][key]) << k.name << ": " << key << " at step " << m1[i]["step"];
    }
  }
}

}  // namespace attnmt::kernel_switch_test
