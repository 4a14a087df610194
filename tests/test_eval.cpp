// Evaluation (src/eval/): BLEU by length, chrF, AER, `evaluate`, `attention`, `compare` and `average` on a trained
// tiny run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/host.h"
#include "data/batcher.h"
#include "data/toy_corpus.h"
#include "eval/aer.h"
#include "eval/chrf.h"
#include "eval/evaluator.h"
#include "eval/report.h"
#include "model/checkpoint.h"
#include "run/run_dir.h"
#include "support.h"
#include "train/trainer.h"
#include "translate/alignment.h"
#include "translate/search.h"
#include "translate/translator.h"

using namespace attnmt;

using test::NoneRun;
using test::output_lines;
using test::tiny_none_run;
using test::tiny_run;

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
  const double configured = j["length_penalty"].get<double>();  // the run's eval.length_penalty
  EXPECT_DOUBLE_EQ(configured, Config().eval.length_penalty);
  // --length-penalty overrides the config's for this decode, and the JSON says which was used.
  r = test::run_cli("evaluate --run " + run + " --length-penalty 2.5");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("length penalty 2.50"), std::string::npos) << r.output;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(test::read_file(run + "/eval/test.json"))["length_penalty"].get<double>(), 2.5);
  r = test::run_cli("evaluate --run " + run + " --length-penalty 9");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--length-penalty"), std::string::npos) << r.output;
  r = test::run_cli("evaluate --run " + run + " --beam 0");
  EXPECT_EQ(r.code, 2) << r.output;
  r = test::run_cli("evaluate --run /nonexistent/run");
  EXPECT_EQ(r.code, 2) << r.output;
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
