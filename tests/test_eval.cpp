#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/host.h"
#include "data/batcher.h"
#include "data/toy_corpus.h"
#include "translate/alignment.h"
#include "eval/aer.h"
#include "eval/chrf.h"
#include "translate/translator.h"
#include "eval/report.h"
#include "run/run_dir.h"
#include "model/checkpoint.h"
#include "translate/search.h"
#include "support.h"
#include "train/trainer.h"

using namespace attnmt;

namespace {

Seq2Seq random_model(const std::string& type) {
  ModelConfig m;
  m.embed_dim = 8;
  m.hidden_dim = 16;
  m.dropout = 0.0;
  m.attention.type = attention_type_from_string(type);
  torch::manual_seed(11);
  Seq2Seq model(m, 30, 30);
  model->eval();
  return model;
}

std::vector<std::vector<int64_t>> some_sources() {
  return {{5, 6, 7, 8, 9}, {10, 11}, {12, 13, 14, 15, 16, 17, 18}, {19, 20, 21}};
}

// A trained tiny run shared by the CLI tests (trained once per test binary run).
const std::string& tiny_run() {
  static std::string dir = [] {
    std::string corpus = test::tiny_toy_corpus("eval_corpus", 64, 8, 12, 20);
    Config c = test::tiny_config_for(corpus, test::temp_dir("eval_run"), "bahdanau");
    c.train.epochs = 1;
    c.train.batch_size = 16;
    c.eval.beam_size = 3;
    c.eval.buckets = {5, 10, 15};
    validate(c);
    train(c, {}, torch::kCPU);
    return c.run_dir;
  }();
  return dir;
}

// A trained tiny run without attention, and its corpus, shared by the tests that refuse it.
struct NoneRun {
  std::string corpus, dir;
};
const NoneRun& tiny_none_run() {
  static NoneRun r = [] {
    std::string corpus = test::tiny_toy_corpus("none_corpus", 32, 6, 6, 12);
    Config c = test::tiny_config_for(corpus, test::temp_dir("none_run"), "none");
    c.model.hidden_dim = 8;
    c.train.epochs = 1;
    validate(c);
    train(c, {}, torch::kCPU);
    return NoneRun{corpus, c.run_dir};
  }();
  return r;
}

}  // namespace

TEST(Search, BeamOneEqualsGreedyWithoutPenalty) {
  for (const char* type : {"bahdanau", "luong", "none"}) {
    Seq2Seq model = random_model(type);
    auto srcs = some_sources();
    Batch b = make_src_batch(srcs, {0, 1, 2, 3});
    SearchOptions so;
    so.beam_size = 1;
    so.length_penalty = 0.0;
    auto g = greedy_search(model, b, so, torch::kCPU);
    auto bs = beam_search(model, b, so, torch::kCPU);
    ASSERT_EQ(g.size(), 4u);
    ASSERT_EQ(bs.size(), 4u);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(bs[i].size(), 1u);
      EXPECT_EQ(bs[i][0].tokens, g[i].tokens) << type << " sentence " << i;
      EXPECT_NEAR(bs[i][0].score, g[i].score, 1e-3) << type;
    }
  }
}

// SearchOptions::cancelled is asked before every decoder step and ends the search when it says so (serve's deadlines).
TEST(Search, ACancelledSearchStopsBeforeItsNextStep) {
  Seq2Seq model = random_model("bahdanau");
  auto srcs = some_sources();
  Batch b = make_src_batch(srcs, {0, 1, 2, 3});
  for (int beam : {1, 3}) {
    SearchOptions so;
    so.beam_size = beam;
    so.stop_at_eos = false;  // a random model: every row runs to its limit unless cancelled
    int asked = 0;
    so.cancelled = [&asked] { return ++asked > 3; };
    if (beam == 1)
      EXPECT_THROW(greedy_search(model, b, so, torch::kCPU), SearchCancelled);
    else
      EXPECT_THROW(beam_search(model, b, so, torch::kCPU), SearchCancelled);
    EXPECT_EQ(asked, 4) << "beam " << beam << ": asked once a step, and stopped at the first true";
    so.cancelled = [] { return false; };
    if (beam == 1) EXPECT_EQ(greedy_search(model, b, so, torch::kCPU).size(), 4u);  // never cancelled: runs whole
  }
}

TEST(Search, BatchedEqualsOneAtATime) {
  Seq2Seq model = random_model("bahdanau");
  auto srcs = some_sources();
  SearchOptions so;
  so.beam_size = 4;
  so.nbest = 2;
  SearchStats st_together;
  const int64_t reads0 = host_reads(), sends0 = device_sends();
  auto together = beam_search(model, make_src_batch(srcs, {0, 1, 2, 3}), so, torch::kCPU, &st_together);
  ASSERT_EQ(together.size(), 4u);
  // The bookkeeping stays on the device: one read a step, and host values go to the device only when sentences
  // leave the batch (at most 3 times for 4 sentences), not every step.
  EXPECT_EQ(host_reads() - reads0, st_together.steps);
  EXPECT_LE(device_sends() - sends0, 3);
  // A finished sentence leaves the batch: the rows advanced together are those advanced one at a time.
  int64_t rows_alone = 0, longest = 0;
  for (int64_t i = 0; i < 4; ++i) {
    SearchStats st;
    auto alone = beam_search(model, make_src_batch(srcs, {i}), so, torch::kCPU, &st);
    EXPECT_EQ(st.row_steps, st.steps * so.beam_size);
    rows_alone += st.row_steps;
    longest = std::max(longest, st.steps);
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(alone[0].size(), together[static_cast<size_t>(i)].size());
    for (size_t k = 0; k < alone[0].size(); ++k) EXPECT_EQ(alone[0][k].tokens, together[static_cast<size_t>(i)][k].tokens);
  }
  EXPECT_EQ(st_together.steps, longest);
  EXPECT_EQ(st_together.row_steps, rows_alone);
  EXPECT_LT(st_together.row_steps, 4 * so.beam_size * longest);  // the sentences did end at different steps
  auto g_all = greedy_search(model, make_src_batch(srcs, {0, 1, 2, 3}), so, torch::kCPU);
  auto g_one = greedy_search(model, make_src_batch(srcs, {2}), so, torch::kCPU);
  ASSERT_EQ(g_all.size(), 4u);
  ASSERT_EQ(g_one.size(), 1u);
  EXPECT_EQ(g_all[2].tokens, g_one[0].tokens);
}

TEST(Search, BeamResultsSortedByPenalizedScoreWithinLimits) {
  Seq2Seq model = random_model("luong");
  auto srcs = some_sources();
  SearchOptions so;
  so.beam_size = 5;
  so.nbest = 5;
  so.length_penalty = 1.0;
  auto res = beam_search(model, make_src_batch(srcs, {0, 1, 2, 3}), so, torch::kCPU);
  ASSERT_EQ(res.size(), 4u);
  for (size_t i = 0; i < res.size(); ++i) {
    ASSERT_FALSE(res[i].empty());
    for (size_t k = 1; k < res[i].size(); ++k) EXPECT_GE(res[i][k - 1].score, res[i][k].score);
    for (const auto& h : res[i])
      EXPECT_LE(h.tokens.size(), static_cast<size_t>(std::floor(1.5 * static_cast<double>(srcs[i].size()))) + 10);
  }
  EXPECT_NEAR(length_penalty(7, 1.0), 2.0, 1e-12);  // (5 + 7) / 6
  EXPECT_EQ(length_penalty(7, 0.0), 1.0);
}

TEST(Chrf, HandCases) {
  EXPECT_NEAR(corpus_chrf({"the cat"}, {{"the cat"}}).score, 100.0, 1e-9);
  EXPECT_EQ(corpus_chrf({"xyz"}, {{"abc"}}).score, 0.0);
  // hyp "ab", ref "abc": order 1: P = 2/2, R = 2/3; order 2: P = 1/1, R = 1/2; order 3 has no hypothesis
  // n-grams and is skipped. avgP = 1, avgR = 7/12; F2 = 5 * 1 * 7/12 / (4 + 7/12) = 35/55.
  EXPECT_NEAR(corpus_chrf({"ab"}, {{"abc"}}).score, 100.0 * 35.0 / 55.0, 1e-9);
  // Whitespace is removed: "a b" scores as "ab".
  EXPECT_NEAR(corpus_chrf({"a b"}, {{"abc"}}).score, 100.0 * 35.0 / 55.0, 1e-9);
  // Characters are code points: "é" is one character, so "é" vs "éa" is the same case as "a" vs "ab":
  // order 1: P = 1, R = 1/2; F2 = 5 * 0.5 / (4 + 0.5) = 2.5 / 4.5.
  EXPECT_NEAR(corpus_chrf({"é"}, {{"éa"}}).score, 100.0 * 2.5 / 4.5, 1e-9);
  // Two references: the better one per sentence counts.
  EXPECT_NEAR(corpus_chrf({"ab"}, {{"zzz"}, {"abc"}}).score, 100.0 * 35.0 / 55.0, 1e-9);
}

TEST(Alignment, AerHandCases) {
  Alignment gold = {{0, 0}, {1, 2}, {2, 1}};
  EXPECT_EQ(aer_counts(gold, gold).aer(), 0.0);
  EXPECT_EQ(aer_counts({{0, 1}, {1, 0}}, gold).aer(), 1.0);
  // A = {0-0, 1-1}, G as above: |A n G| = 1, 1 - 2*1/(2+3) = 0.6
  EXPECT_NEAR(aer_counts({{0, 0}, {1, 1}}, gold).aer(), 0.6, 1e-12);
  std::vector<std::vector<float>> w = {{0.7f, 0.2f, 0.1f}, {0.1f, 0.1f, 0.8f}, {0.2f, 0.5f, 0.3f}};
  Alignment h = hard_alignment(w);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[1], std::make_pair(2, 1));
  EXPECT_EQ(aer_counts(h, gold).aer(), 0.0);
  EXPECT_NEAR(mean_entropy({{0.5f, 0.5f}}), std::log(2.0), 1e-6);
}

TEST(Evaluate, BucketsFromEdges) {
  auto b = make_buckets({10, 20});
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].min, 1);
  EXPECT_EQ(b[0].max, 10);
  EXPECT_EQ(b[1].min, 11);
  EXPECT_EQ(b[2].max, -1);
}

TEST(Evaluate, CliWritesHypothesesAndJson) {
  const std::string& run = tiny_run();
  auto r = test::run_cli("evaluate --run " + run);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("BLEU|nrefs:1"), std::string::npos) << r.output;
  auto j = nlohmann::json::parse(test::read_file(run + "/eval/test.json"));
  for (const char* k : {"bleu", "chrf", "signature", "beam_size", "sentences", "decode_s", "sentences_per_s", "by_length", "aer"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["sentences"], 12);
  EXPECT_EQ(j["beam_size"], 3);
  int64_t total = 0;
  for (const auto& b : j["by_length"]) total += b["count"].get<int64_t>();
  EXPECT_EQ(total, 12);
  std::string hyp = test::read_file(run + "/eval/test.hyp");
  EXPECT_EQ(std::count(hyp.begin(), hyp.end(), '\n'), 12);
  r = test::run_cli("evaluate --run " + run + " --beam 0");
  EXPECT_EQ(r.code, 2) << r.output;
  r = test::run_cli("evaluate --run /nonexistent/run");
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(Translate, StdinEmptyLinesAndFiles) {
  const std::string& run = tiny_run();
  std::string dir = test::temp_dir("translate");
  test::write_file(dir + "/in.txt", "the cat sleeps .\n\nthe dog sees the black cat .\n");
  auto r = test::run_cli("translate --run " + run + " --beam 2 --log-level error", dir + "/in.txt");
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> lines;
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines[1], "");   // empty in -> empty out
  EXPECT_FALSE(lines[0].empty());
  r = test::run_cli("translate --run " + run + " --input " + dir + "/in.txt --output " + dir + "/out.txt");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string out = test::read_file(dir + "/out.txt");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
  test::write_file(dir + "/bad.txt", "ok\n\xff\xfe\n");
  r = test::run_cli("translate --run " + run + " --input " + dir + "/bad.txt --output " + dir + "/bad_out.txt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad_out.txt"));  // no half-written output
}

TEST(BleuCli, FormatsJsonAndErrors) {
  std::string dir = test::temp_dir("bleu_cli");
  test::write_file(dir + "/h", "a b c d\n");
  test::write_file(dir + "/r", "a b x d e\n");
  test::write_file(dir + "/r2", "a\nb\n");
  auto r = test::run_cli("bleu --hyp " + dir + "/h --ref " + dir + "/r --log-level error");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("= 27.53 75.0/33.3/25.0/25.0"), std::string::npos) << r.output;
  r = test::run_cli("bleu --hyp " + dir + "/h --ref " + dir + "/r --json --metrics bleu,chrf --log-level error");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_NEAR(j["score"].get<double>(), 27.534, 1e-3);
  EXPECT_EQ(j["precisions"].size(), 4u);
  EXPECT_TRUE(j.contains("chrf"));
  r = test::run_cli("bleu --hyp " + dir + "/h --ref " + dir + "/r2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("1 lines"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has 2"), std::string::npos) << r.output;
}

TEST(AttentionCli, WritesMapsGalleryAndAer) {
  const std::string& run = tiny_run();
  auto cfg = nlohmann::json::parse(test::read_file(run + "/config.json"));
  std::string src = cfg["data"]["test"]["src"], ref = cfg["data"]["test"]["tgt"], align = cfg["data"]["test"]["align"];
  std::string out = test::temp_dir("maps");
  auto r = test::run_cli("attention --run " + run + " --src " + src + " --ref " + ref + " --align " + align + " --out " + out +
                         " --limit 3");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"0001.json", "0001.csv", "0001.svg", "0003.svg", "index.html"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(out + "/0004.svg"));
  auto j = nlohmann::json::parse(test::read_file(out + "/0001.json"));
  std::istringstream refs(test::read_file(ref));
  std::string first_ref;
  std::getline(refs, first_ref);
  ASSERT_EQ(j["tgt_tokens"].size(), std::count(first_ref.begin(), first_ref.end(), ' ') + 1u);  // follows the reference
  ASSERT_EQ(j["weights"].size(), j["tgt_tokens"].size());
  for (const auto& row : j["weights"]) {
    ASSERT_EQ(row.size(), j["src_tokens"].size());
    double s = 0;
    for (const auto& v : row) s += v.get<double>();
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
  EXPECT_TRUE(j.contains("aer"));
  EXPECT_NE(test::read_file(out + "/index.html").find("AER"), std::string::npos);
  r = test::run_cli("attention --run " + run + " --src " + src + " --out " + out + " --align " + align);
  EXPECT_EQ(r.code, 2) << r.output;  // --align without --ref
  r = test::run_cli("attention --run " + run + " --src " + src + " --out " + out + " --format png");
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(AttentionCli, NoneModelSaysThereAreNoWeights) {
  const NoneRun& none = tiny_none_run();
  std::string out = test::temp_dir("none_maps") + "/maps";
  auto r = test::run_cli("attention --run " + none.dir + " --src " + none.corpus + "/test.en --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no attention weights"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));  // nothing misleading written
}

TEST(SharedData, Multi30kTinyTrainAndEvaluate) {
  std::string shared = test::shared_data_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared/data not found next to the checkout: skipping the Multi30k integration test";
  // The first 500 training pairs, 50 validation and 50 test pairs of German->English.
  std::string dir = test::temp_dir("m30k");
  auto head = [&](const std::string& from, const std::string& to, size_t n) {
    std::istringstream in(test::read_file(from));
    std::string out, line;
    for (size_t i = 0; i < n && std::getline(in, line); ++i) out += line + "\n";
    test::write_file(to, out);
  };
  for (const char* l : {"de", "en"}) {
    head(shared + "/multi30k/train." + std::string(l), dir + "/train." + l, 500);
    head(shared + "/multi30k/val." + std::string(l), dir + "/val." + l, 50);
    head(shared + "/multi30k/test2016." + std::string(l), dir + "/test." + l, 50);
  }
  Config c = config_from_json(read_json_file(test::source_dir() + "/configs/multi30k_bahdanau.json"));
  c.run_dir = dir + "/run";
  c.data.train = {dir + "/train.de", dir + "/train.en", "", ""};
  c.data.valid = {dir + "/val.de", dir + "/val.en", "", ""};
  c.data.test = {dir + "/test.de", dir + "/test.en", "", ""};
  c.model.embed_dim = 16;
  c.model.hidden_dim = 32;
  c.train.max_steps = 5;
  c.train.batch_size = 32;
  c.eval.beam_size = 2;
  validate(c);
  TrainResult tr = train(c, {}, torch::kCPU);
  EXPECT_EQ(tr.state.step, 5);
  auto r = test::run_cli("evaluate --run " + c.run_dir);
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(test::read_file(c.run_dir + "/eval/test.json"));
  EXPECT_EQ(j["sentences"], 50);
  EXPECT_TRUE(j.contains("ppl"));
}

TEST(Search, BeamKeepsSearchingWhileALongerHypothesisCanWinUnderThePenalty) {
  // A model whose output layer ignores its input: every step has the same distribution,
  // P(<eos>) = 0.5, P(w) = 0.49 (id 4), the rest 0.01 spread over ids 0, 1, 2, 5.
  // Without a penalty the best hypothesis is "<eos>" at once (log 0.5). With alpha = 2,
  // score(w^k <eos>) = (k log 0.49 + log 0.5) / ((5 + k + 1) / 6)^2 keeps rising towards 0 as k grows
  // and passes log 0.5 from k = 27 on, so the best hypothesis runs to the length limit. Stopping when
  // the top beam ends would return "<eos>".
  ModelConfig m;
  m.embed_dim = 4;
  m.hidden_dim = 6;
  m.dropout = 0.0;
  m.attention.type = AttentionType::kBahdanau;
  torch::manual_seed(1);
  Seq2Seq model(m, 6, 6);
  model->eval();
  {
    torch::NoGradGuard ng;
    auto params = model->named_parameters();
    params["decoder.out.weight"].zero_();
    params["decoder.out.bias"].copy_(torch::log(torch::tensor({0.0025f, 0.0025f, 0.0025f, 0.5f, 0.49f, 0.0025f})));
  }
  std::vector<std::vector<int64_t>> srcs = {std::vector<int64_t>(20, 4)};  // limit = floor(1.5 * 20) + 10 = 40 tokens
  Batch b = make_src_batch(srcs, {0});
  SearchOptions so;
  so.beam_size = 3;
  so.length_penalty = 0.0;
  auto plain = beam_search(model, b, so, torch::kCPU);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_FALSE(plain[0].empty());
  EXPECT_TRUE(plain[0][0].tokens.empty());
  EXPECT_NEAR(plain[0][0].score, std::log(0.5), 1e-5);
  so.length_penalty = 2.0;
  auto penalized = beam_search(model, b, so, torch::kCPU);
  ASSERT_FALSE(penalized[0].empty());
  const auto& best = penalized[0][0];
  // w^39 <eos>: (39 log .49 + log .5) / (45/6)^2 = -0.5069 beats w^40 cut at the limit (-0.5073),
  // every shorter hypothesis, and "<eos>" alone (-0.6931).
  ASSERT_EQ(best.tokens.size(), 39u);
  for (int64_t t : best.tokens) EXPECT_EQ(t, 4);
  EXPECT_NEAR(best.score, (39 * std::log(0.49) + std::log(0.5)) / std::pow(45.0 / 6.0, 2.0), 1e-4);
  // Greedy stops at the first <eos>.
  auto g = greedy_search(model, b, so, torch::kCPU);
  EXPECT_TRUE(g[0].tokens.empty());
}

TEST(CompareCli, ReportNumbersMatchTheRunsEvaluations) {
  const std::string& run = tiny_run();
  // A second, different run: the same data with Luong attention.
  Config c = config_from_json(read_json_file(run + "/config.json"));
  c.run_dir = test::temp_dir("compare_luong");
  c.model.attention.type = AttentionType::kLuong;
  c.model.attention.score = LuongScore::kDot;
  validate(c);
  train(c, {}, torch::kCPU);
  std::string out = test::temp_dir("compare_out") + "/report";
  auto r = test::run_cli("compare " + run + " " + c.run_dir + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"report.md", "report.json", "bleu_by_length.svg", "index.html"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  auto rep = nlohmann::json::parse(test::read_file(out + "/report.json"));
  ASSERT_EQ(rep["runs"].size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    std::string dir = k == 0 ? run : c.run_dir;
    auto ev = nlohmann::json::parse(test::read_file(dir + "/eval/test.json"));  // compare evaluated it if needed
    const auto& row = rep["runs"][k];
    EXPECT_EQ(row["run"], dir);
    EXPECT_DOUBLE_EQ(row["eval"]["bleu"].get<double>(), ev["bleu"].get<double>());
    ASSERT_EQ(row["eval"]["by_length"].size(), ev["by_length"].size());
    for (size_t b = 0; b < ev["by_length"].size(); ++b)
      EXPECT_DOUBLE_EQ(row["eval"]["by_length"][b]["bleu"].get<double>(), ev["by_length"][b]["bleu"].get<double>());
    EXPECT_GT(row["parameters"].get<int64_t>(), 0);
  }
  EXPECT_EQ(rep["runs"][1]["attention"], "luong/dot");
  std::string md = test::read_file(out + "/report.md");
  char bleu0[32];
  std::snprintf(bleu0, sizeof(bleu0), "%.2f", rep["runs"][0]["eval"]["bleu"].get<double>());
  EXPECT_NE(md.find(bleu0), std::string::npos) << md;
  EXPECT_NE(rep["summary"].get<std::string>().find("keeps"), std::string::npos);
  // The terminal table: BLEU by length side by side, the overall BLEU, the long/short share.
  EXPECT_NE(r.output.find("BLEU (all)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bleu0), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("longest / shortest"), std::string::npos) << r.output;
  // The page links each run's attention snapshots taken during training.
  const std::string html = test::read_file(out + "/index.html");
  EXPECT_NE(html.find("progress/index.html"), std::string::npos);
  // The longest test sentence: the reference, both runs' translations (their lines of eval/test.hyp), the maps.
  ASSERT_EQ(rep["runs"].size(), 2u);
  const auto refs = read_lines(c.data.test.tgt), srcs = read_lines(c.data.test.src);
  ASSERT_EQ(refs.size(), srcs.size());
  size_t longest = 0;
  for (size_t i = 0; i < srcs.size(); ++i)
    if (tokenize(srcs[i], TokenizerKind::kSpace, false).size() > tokenize(srcs[longest], TokenizerKind::kSpace, false).size()) longest = i;
  EXPECT_NE(html.find(refs[longest]), std::string::npos);
  for (const std::string& d : {run, c.run_dir}) {
    const auto hyps = read_lines(d + "/eval/test.hyp");
    ASSERT_EQ(hyps.size(), srcs.size());
    EXPECT_NE(html.find(hyps[longest]), std::string::npos) << d;
  }
  EXPECT_TRUE(std::filesystem::exists(out + "/longest_1.svg"));
  EXPECT_TRUE(std::filesystem::exists(out + "/longest_2.svg"));
}

// The long-vs-short sentence in the comparison uses buckets that hold at least 5% of the sentences:
// Multi30k's test set has a single source over 30 tokens, whose BLEU said "keeps 106%".
TEST(CompareReport, ParagraphIgnoresNearlyEmptyBuckets) {
  attnmt::RunSummary a;
  a.name = "a";
  a.attention = "bahdanau";
  a.eval.bleu = 30;
  a.eval.by_length = {{1, 10, 100, 40.0}, {11, 20, 100, 20.0}, {21, -1, 1, 90.0}};
  std::string p = attnmt::comparison_paragraph({a});
  EXPECT_NE(p.find("from sources of 1-10 words to sources of 11-20 words (40.0 to 20.0)"), std::string::npos) << p;
  EXPECT_EQ(p.find("21-"), std::string::npos) << p;
}

namespace {
std::vector<std::string> output_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The stdout of a translate run (stderr kept apart, so that log lines never mix in).
test::CliResult translate_out(const std::string& args, const std::string& input) {
  return test::run_cli("--log-level error translate " + args + " --input " + input);
}

// Five test sentences of the tiny run's corpus and an empty line.
std::string translate_input() {
  static std::string path = [] {
    std::string dir = test::temp_dir("translate_outputs");
    std::vector<std::string> src = read_lines(test::source_dir() + "/data/toy/test.en");
    std::string text;
    for (size_t i = 0; i < 5; ++i) text += src[i * 7] + "\n";
    text += "\n";
    return test::write_file(dir + "/in.txt", text);
  }();
  return path;
}
}  // namespace

// The terminal table names every run in full (two runs whose names share their first 12 characters were
// both shown as the same cut name), and every row stays as wide as the header.
TEST(CompareReport, TextTableKeepsLongRunNamesApart) {
  attnmt::RunSummary a, b;
  a.name = "multi30k_spm_bahdanau";
  b.name = "multi30k_spm_scaled_dot";
  a.eval.bleu = 38.3;
  b.eval.bleu = 38.9;
  a.eval.by_length = {{1, 10, 100, 40.0}, {11, -1, 100, 30.0}};
  b.eval.by_length = {{1, 10, 100, 41.0}, {11, -1, 100, 35.0}};
  const std::vector<std::string> lines = output_lines(attnmt::comparison_table_text({a, b}));
  ASSERT_EQ(lines.size(), 5u);  // header, two buckets, BLEU (all), longest / shortest
  EXPECT_NE(lines[0].find(" multi30k_spm_bahdanau "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" multi30k_spm_scaled_dot"), std::string::npos) << lines[0];
  for (const auto& l : lines) EXPECT_EQ(l.size(), lines[0].size()) << l;
  EXPECT_NE(lines[3].find("38.30"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("75%"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("85%"), std::string::npos) << lines[4];
  // With what ended each run known, a sixth line says it.
  a.ended_by = "early stopping";
  b.ended_by = "max_minutes";
  const std::vector<std::string> more = output_lines(attnmt::comparison_table_text({a, b}));
  ASSERT_EQ(more.size(), 6u);
  EXPECT_EQ(more[5].rfind("ended by", 0), 0u) << more[5];
  EXPECT_NE(more[5].find("early stop"), std::string::npos) << more[5];
  EXPECT_NE(more[5].find("max_minutes"), std::string::npos) << more[5];
  EXPECT_EQ(more[5].size(), more[0].size()) << more[5];
}

TEST(Translate, NbestIsDistinctSortedAndStartsWithTheBest) {
  const std::string& run = tiny_run();
  auto plain = translate_out("--run " + run + " --beam 3", translate_input());
  ASSERT_EQ(plain.code, 0) << plain.output;
  auto r = translate_out("--run " + run + " --beam 3 --nbest 3 --format jsonl", translate_input());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto best = output_lines(plain.output), lines = output_lines(r.output);
  ASSERT_EQ(best.size(), 6u) << plain.output;
  ASSERT_EQ(lines.size(), 6u) << r.output;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto j = nlohmann::json::parse(lines[i]);
    const auto& hyps = j.at("hyps");
    ASSERT_GE(hyps.size(), 1u);
    ASSERT_LE(hyps.size(), 3u);
    EXPECT_EQ(hyps[0].at("text").get<std::string>(), best[i]) << "the first of the n-best is not --nbest 1's output";
    if (i == 5) {  // the empty line: one empty hypothesis
      EXPECT_EQ(j.at("src").get<std::string>(), "");
      EXPECT_EQ(hyps.size(), 1u);
      EXPECT_EQ(hyps[0].at("text").get<std::string>(), "");
      continue;
    }
    EXPECT_EQ(hyps.size(), 3u) << lines[i];
    std::set<std::vector<std::string>> distinct;
    for (size_t k = 0; k < hyps.size(); ++k) {
      distinct.insert(hyps[k].at("tokens").get<std::vector<std::string>>());
      EXPECT_LE(hyps[k].at("logprob").get<double>(), 0.0);
      if (k > 0) EXPECT_GE(hyps[k - 1].at("score").get<double>(), hyps[k].at("score").get<double>()) << lines[i];
    }
    EXPECT_EQ(distinct.size(), hyps.size()) << lines[i];
  }
  // The text form: index ||| text ||| score ||| log-probability, the same hypotheses.
  auto t = translate_out("--run " + run + " --beam 3 --nbest 3", translate_input());
  ASSERT_EQ(t.code, 0) << t.output;
  const auto tl = output_lines(t.output);
  ASSERT_EQ(tl.size(), 16u) << t.output;  // 5 x 3 and one for the empty line
  EXPECT_EQ(tl[0].rfind("0 ||| " + best[0] + " ||| ", 0), 0u) << tl[0];
  EXPECT_EQ(tl[15].rfind("5 |||  ||| ", 0), 0u) << tl[15];
  // More hypotheses than the beam keeps: one line, exit 2.
  auto bad = translate_out("--run " + run + " --beam 3 --nbest 4", translate_input());
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("exceeds the beam size 3"), std::string::npos) << bad.output;
}

// Hard alignments are Pharaoh pairs within the sentence lengths, and the ones forced decoding of the same
// hypothesis gives (the code path of evaluate's AER): one argmax alignment.
TEST(Translate, HardAlignmentsAreInRangeAndMatchForcedDecoding) {
  const std::string& run = tiny_run();
  auto r = translate_out("--run " + run + " --beam 3 --alignment hard --format tsv", translate_input());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto lines = output_lines(r.output);
  ASSERT_EQ(lines.size(), 6u) << r.output;
  EXPECT_EQ(lines[5], "\t");  // empty in, empty out
  LoadedRun loaded = load_run(run, "best", "cpu");
  std::vector<std::string> src = read_lines(translate_input());
  ASSERT_EQ(src.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    const auto tab = lines[i].find('\t');
    ASSERT_NE(tab, std::string::npos) << lines[i];
    const std::string text = lines[i].substr(0, tab), pairs = lines[i].substr(tab + 1);
    const auto src_tok = loaded.tok.encode(src[i], Side::kSource), hyp_tok = loaded.tok.encode(text, Side::kTarget);
    const Alignment a = parse_pharaoh(pairs, "translate output");
    for (const auto& [s, t] : a) {
      EXPECT_LT(s, static_cast<int>(src_tok.size())) << pairs;
      EXPECT_LT(t, static_cast<int>(hyp_tok.size())) << pairs;
    }
    EXPECT_EQ(a.size(), hyp_tok.size()) << "one link per target token: " << lines[i];
    auto forced = forced_attention(loaded, {src_tok}, {hyp_tok});
    ASSERT_EQ(forced.size(), 1u);
    EXPECT_EQ(pharaoh(hard_alignment(forced[0])), pairs) << lines[i];
  }
  // Above a threshold instead of the argmax: every link's weight exceeds it (checked through soft weights).
  auto th = translate_out("--run " + run + " --beam 3 --alignment hard --alignment-threshold 0.3 --format tsv", translate_input());
  ASSERT_EQ(th.code, 0) << th.output;
  EXPECT_EQ(output_lines(th.output).size(), 6u);
}

// The Translator in two halves (serve counts the tokens against its limits before decoding them) gives what it gives
// in one: the same hypotheses, scores and weights; the empty line one empty hypothesis.
TEST(Translate, TokenizedThenDecodedEqualsTranslatedAtOnce) {
  LoadedRun loaded = load_run(tiny_run(), "best", "cpu");
  SearchOptions opt = search_options(loaded.cfg.eval, 3);
  opt.nbest = 2;
  opt.keep_weights = true;
  const Translator tr(loaded, opt, 2);
  const std::vector<std::string> src = read_lines(translate_input());
  ASSERT_EQ(src.size(), 6u);
  const auto tokens = tr.tokenize(src);
  ASSERT_EQ(tokens.size(), src.size());
  EXPECT_TRUE(tokens[5].empty());
  const auto once = tr.nbest(src), halves = tr.nbest_tokens(tokens);
  ASSERT_EQ(once.size(), src.size());
  ASSERT_EQ(halves.size(), once.size());
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_EQ(halves[i].size(), once[i].size()) << i;
    EXPECT_EQ(once[i].size(), i == 5 ? 1u : 2u) << i;
    for (size_t n = 0; n < once[i].size(); ++n) {
      EXPECT_EQ(halves[i][n].src_tokens, tokens[i]);
      EXPECT_EQ(halves[i][n].text, once[i][n].text);
      EXPECT_EQ(halves[i][n].score, once[i][n].score);
      EXPECT_EQ(halves[i][n].weights, once[i][n].weights);
    }
  }
  EXPECT_TRUE(once[5][0].text.empty());
  const auto best = tr.best(src);
  ASSERT_EQ(best.size(), src.size());
  EXPECT_EQ(best[0].text, once[0][0].text);
}

TEST(Translate, SoftRowsSumToOneAndJsonlRoundTripsTheText) {
  const std::string& run = tiny_run();
  auto text = translate_out("--run " + run + " --beam 3", translate_input());
  auto r = translate_out("--run " + run + " --beam 3 --alignment soft --format jsonl", translate_input());
  ASSERT_EQ(text.code, 0) << text.output;
  ASSERT_EQ(r.code, 0) << r.output;
  const auto tl = output_lines(text.output), jl = output_lines(r.output);
  std::vector<std::string> src = read_lines(translate_input());
  ASSERT_EQ(tl.size(), 6u);
  ASSERT_EQ(jl.size(), 6u);
  ASSERT_EQ(src.size(), 6u);
  for (size_t i = 0; i < jl.size(); ++i) {
    auto j = nlohmann::json::parse(jl[i]);
    EXPECT_EQ(j.at("src").get<std::string>(), src[i]);
    const auto& h = j.at("hyps").at(0);
    EXPECT_EQ(h.at("text").get<std::string>(), tl[i]);
    const auto rows = h.at("alignment").get<std::vector<std::vector<double>>>();
    ASSERT_EQ(rows.size(), h.at("tokens").size()) << "one row per target token";
    for (const auto& row : rows) {
      ASSERT_EQ(row.size(), tokenize(src[i], TokenizerKind::kSpace, false).size());
      double sum = 0;
      for (double w : row) sum += w;
      EXPECT_NEAR(sum, 1.0, 1e-4);
    }
  }
}

TEST(Translate, AlignmentOfTheModelWithoutAttentionIsRefused) {
  const NoneRun& none = tiny_none_run();
  auto r = test::run_cli("translate --run " + none.dir + " --alignment hard --input " + none.corpus + "/test.en");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no attention weights"), std::string::npos) << r.output;
}

// Periodic checkpoints: at most keep_checkpoints of them, the newest; averaging two equals the hand mean
// of their parameters; a checkpoint of another model config is refused naming the parameter.
TEST(Average, KeepsTheLastCheckpointsAndAveragesThem) {
  std::string corpus = test::tiny_toy_corpus("average_corpus", 48, 6, 6, 12);
  Config c = test::tiny_config_for(corpus, test::temp_dir("average_run"), "bahdanau");
  c.train.batch_size = 8;
  c.train.max_steps = 5;
  c.train.valid_every = 1;
  c.train.keep_checkpoints = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  const RunDir dir(c.run_dir);
  const auto kept = dir.periodic_checkpoints();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], dir.periodic_checkpoint(4));
  EXPECT_EQ(kept[1], dir.periodic_checkpoint(5));

  const std::string avg = c.run_dir + "/avg.pt";
  auto r = test::run_cli("average --run " + c.run_dir + " --last 2 --out " + avg);
  ASSERT_EQ(r.code, 0) << r.output;
  const int64_t V_src = Vocab::load(dir.src_vocab()).size(), V_tgt = Vocab::load(dir.tgt_vocab()).size();
  Seq2Seq a(c.model, V_src, V_tgt), b(c.model, V_src, V_tgt), m(c.model, V_src, V_tgt);
  load_checkpoint(kept[0], a, nullptr);
  load_checkpoint(kept[1], b, nullptr);
  load_checkpoint(avg, m, nullptr);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pm = m->named_parameters();
  ASSERT_EQ(pa.size(), pm.size());
  for (const char* name : {"decoder.out.weight", "encoder.embed.weight"}) {
    torch::Tensor hand = (pa[name] + pb[name]) / 2;
    EXPECT_TRUE(torch::allclose(pm[name], hand, 1e-6, 1e-7)) << name;
    EXPECT_FALSE(torch::equal(pa[name], pb[name])) << name << ": the two checkpoints should differ";
  }
  r = test::run_cli("evaluate --run " + c.run_dir + " --checkpoint " + avg + " --beam 1");
  EXPECT_EQ(r.code, 0) << r.output;
  r = test::run_cli("average --run " + c.run_dir + " --last 3 --out " + c.run_dir + "/x.pt");
  EXPECT_EQ(r.code, 2) << r.output;

  // Another model config (a smaller hidden size) is refused, naming the parameter.
  Config other = c;
  other.run_dir = test::temp_dir("average_other");
  other.model.hidden_dim = 8;
  other.train.keep_checkpoints = 0;
  validate(other);
  train(other, {}, torch::kCPU);
  r = test::run_cli("average --run " + c.run_dir + " --checkpoints " + kept[1] + " " + other.run_dir + "/last.pt --out " +
                    c.run_dir + "/bad.pt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("has shape"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(c.run_dir + "/bad.pt"));
}
