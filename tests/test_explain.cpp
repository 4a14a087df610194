// attnmt explain (src/translate/explain.h): the tutorial's worked example, and one attention step of trained models of
// every RNN kind with the forward pass's own numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "data/text.h"
#include "run/loaded_run.h"
#include "support.h"
#include "train/trainer.h"
#include "translate/explain.h"
#include "translate/translator.h"

using namespace attnmt;

namespace {

// The tutorial's numbers (softmax of [1, 0, 0.5]: 0.5065, 0.1863, 0.3072; output 18.007).
TEST(Explain, TheTutorialsWorkedExample) {
  const WorkedExample x = worked_example();
  ASSERT_EQ(x.lookup.scores.size(), 3u);
  ASSERT_EQ(x.lookup.scaled.size(), 3u);
  ASSERT_EQ(x.lookup.weights.size(), 3u);
  ASSERT_EQ(x.lookup.context.size(), 1u);
  const std::vector<double> scores = {2, 0, 1}, scaled = {1, 0, 0.5}, weights = {0.506, 0.186, 0.307};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(x.lookup.scores[i], scores[i]) << i;
    EXPECT_DOUBLE_EQ(x.lookup.scaled[i], scaled[i]) << i;
    EXPECT_NEAR(x.lookup.weights[i], weights[i], 5e-4) << i;  // equal to 3 decimals
  }
  EXPECT_DOUBLE_EQ(x.scale, 0.5);
  EXPECT_NEAR(x.lookup.context[0], 18.0, 0.05);

  const auto out = test::run_cli("--log-level error explain --example --format json");
  ASSERT_EQ(out.code, 0) << out.output;
  const auto j = nlohmann::json::parse(out.output);
  ASSERT_EQ(j["weights"].size(), 3u);
  EXPECT_NEAR(j["weights"][0].get<double>(), 0.506, 5e-4);
  EXPECT_NEAR(j["output"].get<double>(), 18.0, 0.05);
  const auto text = test::run_cli("explain --example");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("4. output = sum of weight x value = 18.007"), std::string::npos) << text.output;
}

struct Kind {
  std::string name, attention, score;
  int heads;
};

// A tiny run of one kind, trained a few steps (the numbers need not be good, only the model's own).
std::string kind_run(const Kind& k, const std::string& corpus) {
  Config c = test::tiny_config_for(corpus, test::temp_dir("explain_" + k.name), k.attention);
  if (!k.score.empty()) c.model.attention.score = luong_score_from_string(k.score);
  if (k.heads > 1) c.model.attention.heads = k.heads;
  c.train.max_steps = 12;
  c.train.batch_size = 8;
  c.eval.beam_size = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  return c.run_dir;
}

// For every RNN kind: the weights are the softmax of the scaled scores and sum to one, the scaled scores are the
// scores times the scale, the context formed from the weights and values is the decoder's own at that step, and the
// weights are the row of the map `attention` draws for the same sentence and translation (forced decoding).
TEST(Explain, EveryKindsStepIsItsForwardPass) {
  const std::string corpus = test::tiny_toy_corpus("explain_corpus", 48, 6, 6, 10);
  const std::string sentence = read_lines(corpus + "/test.en").at(0);
  const std::vector<Kind> kinds = {{"bahdanau", "bahdanau", "", 1},    {"dot", "luong", "dot", 1},
                                   {"general", "luong", "general", 1}, {"concat", "luong", "concat", 1},
                                   {"heads", "scaled_dot", "", 2},     {"none", "none", "", 1}};
  for (const Kind& k : kinds) {
    LoadedRun run = load_run(kind_run(k, corpus), "best", "cpu");
    ExplainOptions first;
    first.step = 1;
    const size_t length = explain_step(run, sentence, first).target.size();
    ASSERT_GE(length, 1u) << k.name << ": the test needs a translation of a token or more";
    // The first step and the last token's (a later one, whose state the earlier steps made), each against the map.
    for (const int64_t step : {int64_t{1}, static_cast<int64_t>(length)}) {
      ExplainOptions o;
      o.step = step;
      const StepExplanation e = explain_step(run, sentence, o);
      ASSERT_EQ(e.target.size(), length) << k.name;
      EXPECT_EQ(e.step, step) << k.name;
      ASSERT_EQ(e.context.size(), 16u) << k.name;  // hidden 16
      if (k.attention == "none") {
        EXPECT_TRUE(e.heads.empty());
        continue;
      }
      ASSERT_EQ(e.heads.size(), static_cast<size_t>(k.heads)) << k.name;
      ASSERT_EQ(e.query.size(), 16u) << k.name;
      EXPECT_LT(e.context_check, 1e-5) << k.name;
      const double scale = k.attention == "scaled_dot" ? 1.0 / std::sqrt(16.0 / k.heads) : 1.0;
      EXPECT_DOUBLE_EQ(e.scale, scale) << k.name;
      std::vector<double> mean(e.source.size(), 0.0);
      for (const HeadLookup& h : e.heads) {
        ASSERT_EQ(h.weights.size(), e.source.size()) << k.name;
        ASSERT_EQ(h.scaled.size(), e.source.size()) << k.name;
        ASSERT_EQ(h.scores.size(), e.source.size()) << k.name;
        double z = 0;
        for (double s : h.scaled) z += std::exp(s);
        for (size_t s = 0; s < h.weights.size(); ++s) {
          EXPECT_NEAR(h.weights[s], std::exp(h.scaled[s]) / z, 1e-6) << k.name;
          EXPECT_NEAR(h.scaled[s], h.scores[s] * scale, 1e-5 * (1 + std::abs(h.scaled[s]))) << k.name;
          mean[s] += h.weights[s] / static_cast<double>(e.heads.size());
        }
        EXPECT_NEAR(std::accumulate(h.weights.begin(), h.weights.end(), 0.0), 1.0, 1e-6) << k.name;
      }
      // The map of `attention` for this translation: one row per target token, row step - 1 (the mean over heads).
      const auto maps = forced_attention(run, {e.source}, {e.target});
      ASSERT_EQ(maps.size(), 1u) << k.name;
      ASSERT_EQ(maps[0].size(), length) << k.name;
      const auto& row = maps[0][static_cast<size_t>(step - 1)];
      ASSERT_EQ(row.size(), mean.size()) << k.name;
      for (size_t s = 0; s < row.size(); ++s) EXPECT_NEAR(row[s], mean[s], 1e-4) << k.name << " step " << step << " source " << s;
    }
  }
}

// A self-attention model, each of its attentions in each layer: the weights are the softmax of the scaled scores over
// the keys a position may see (exactly the causal triangle for the decoder's own: keys after the query are masked
// and weigh 0), the context formed from them is the forward pass's own, and the last layer's cross-attention is the
// map `attention` draws.
TEST(Explain, SelfAttentionLayersAndHeadsAreTheirForwardPass) {
  const std::string corpus = test::tiny_toy_corpus("explain_sa_corpus", 48, 6, 6, 10);
  const std::string sentence = read_lines(corpus + "/test.en").at(0);
  Config c = test::tiny_self_attention_config_for(corpus, test::temp_dir("explain_sa"), 2);
  c.model.decoder.heads = 4;
  c.train.max_steps = 12;
  c.train.batch_size = 8;
  c.eval.beam_size = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  LoadedRun run = load_run(c.run_dir, "best", "cpu");
  const size_t length = explain_step(run, sentence, {}).target.size();
  ASSERT_GE(length, 1u) << "the test needs a translation of a token or more";
  const std::map<std::string, size_t> heads = {{"encoder", 2}, {"decoder", 4}, {"cross", 2}};
  for (const std::string part : {"encoder", "decoder", "cross"}) {
    for (const int64_t layer : {int64_t{1}, int64_t{2}}) {
      ExplainOptions o;
      o.part = part;
      o.layer = layer;
      o.step = part == "encoder" ? 2 : static_cast<int64_t>(length);  // a later position: some keys masked in the decoder
      const StepExplanation e = explain_step(run, sentence, o);
      const std::string at = part + " layer " + std::to_string(layer);
      EXPECT_EQ(e.layer, layer) << at;
      EXPECT_EQ(e.layers, 2) << at;
      ASSERT_EQ(e.heads.size(), heads.at(part)) << at;
      const size_t keys = part == "decoder" ? length + 1 : e.source.size();
      ASSERT_EQ(e.keys.size(), keys) << at;
      ASSERT_EQ(e.masked.size(), keys) << at;
      for (size_t j = 0; j < keys; ++j)  // the decoder's row t sees keys 0..t (<bos> and the tokens before its output)
        EXPECT_EQ(e.masked[j], part == "decoder" && static_cast<int64_t>(j) >= e.step) << at << " key " << j;
      if (part == "encoder") {
        EXPECT_EQ(e.query_token, e.source.at(1)) << at;
      }
      if (part == "decoder") {
        EXPECT_EQ(e.query_token, length >= 2 ? e.target[length - 2] : std::string("<bos>")) << at;
      }
      EXPECT_LT(e.context_check, 1e-5) << at;
      std::vector<double> mean(keys, 0.0);
      for (const HeadLookup& h : e.heads) {
        ASSERT_EQ(h.weights.size(), keys) << at;
        ASSERT_EQ(h.scaled.size(), keys) << at;
        double z = 0;
        for (size_t j = 0; j < keys; ++j)
          if (!e.masked[j]) z += std::exp(h.scaled[j]);
        for (size_t j = 0; j < keys; ++j) {
          EXPECT_NEAR(h.weights[j], e.masked[j] ? 0.0 : std::exp(h.scaled[j]) / z, 1e-6) << at << " key " << j;
          mean[j] += h.weights[j] / static_cast<double>(e.heads.size());
        }
        EXPECT_NEAR(std::accumulate(h.weights.begin(), h.weights.end(), 0.0), 1.0, 1e-6) << at;
        // The head's whole map: one row per query position, the explained row among them, the decoder's a triangle.
        ASSERT_EQ(h.map.size(), e.rows.size()) << at;
        ASSERT_EQ(h.map.size(), part == "encoder" ? e.source.size() : length + 1) << at;
        for (size_t q = 0; q < h.map.size(); ++q) {
          ASSERT_EQ(h.map[q].size(), keys) << at;
          for (size_t j = q + 1; part == "decoder" && j < keys; ++j) EXPECT_EQ(h.map[q][j], 0.0) << at << " " << q << "," << j;
        }
        const auto& row = h.map[static_cast<size_t>(e.step - 1)];
        for (size_t j = 0; j < keys; ++j) EXPECT_DOUBLE_EQ(row[j], h.weights[j]) << at;
      }
      if (part == "cross" && layer == 2) {  // the map of `attention`: the last layer's cross-attention, mean of heads
        const auto maps = forced_attention(run, {e.source}, {e.target});
        ASSERT_EQ(maps.size(), 1u);
        ASSERT_EQ(maps[0].size(), length);
        const auto& row = maps[0][static_cast<size_t>(e.step - 1)];
        ASSERT_EQ(row.size(), mean.size());
        for (size_t j = 0; j < row.size(); ++j) EXPECT_NEAR(row[j], mean[j], 1e-4) << at << " source " << j;
      }
    }
  }
  // The command: the triangle said in text, and the JSON's keys and masks.
  const auto text = test::run_cli("--device cpu explain --run " + c.run_dir + " --src '" + sentence + "' --part decoder --layer 1");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("decoder self-attention (causal), layer 1 of 2"), std::string::npos) << text.output;
  const auto js = test::run_cli("--log-level error --device cpu explain --run " + c.run_dir + " --src '" + sentence +
                                "' --part decoder --step " + std::to_string(length) + " --format json");
  ASSERT_EQ(js.code, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output);
  ASSERT_EQ(j["masked"].size(), length + 1);
  EXPECT_TRUE(j["masked"].back().get<bool>());
  EXPECT_FALSE(j["masked"][0].get<bool>());
  EXPECT_EQ(j["layer"], 2);
}

// Bad input: exit 2 and one error line that says what is wrong.
TEST(Explain, BadInputIsOneLineAndExitTwo) {
  const std::string& run = test::tiny_run();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"explain --run " + run + " --src 'the cat' --step 500", "--step must be between 1 and"},
      {"explain --run " + run + " --src 'the cat' --word no-such-word", "the translation has no word 'no-such-word'"},
      {"explain --run " + run + " --src ''", "explain: give --run DIR and --src SENTENCE"},
      {"explain --run " + run + " --src '   '", "explain: --src is empty"},
      {"explain --src 'the cat'", "explain: give --run DIR and --src SENTENCE"},
      {"explain --run " + run + " --src 'the cat' --format xml", "--format"},
      {"explain --run /nonexistent/run --src 'the cat'", "/nonexistent/run"},
      {"explain --run " + run + " --src 'the cat' --part encoder", "--part encoder needs a self-attention encoder"},
      {"explain --run " + run + " --src 'the cat' --layer 2", "--layer applies to self-attention stacks"},
      {"explain --run " + run + " --src 'the cat' --part sideways", "--part"},
      {"explain --run " + run + " --src 'the cat' --head 2", "--head must be between 1 and 1"}};
  for (const auto& [args, expect] : cases) {
    const auto r = test::run_cli("--device cpu " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    std::vector<std::string> errors;
    for (const std::string& l : test::output_lines(r.output))
      if (l.find("[error]") != std::string::npos || l.rfind("attnmt: error:", 0) == 0) errors.push_back(l);
    ASSERT_EQ(errors.size(), 1u) << args << "\n" << r.output;
    EXPECT_NE(errors[0].find(expect), std::string::npos) << args << "\n" << errors[0];
  }
}

}  // namespace
