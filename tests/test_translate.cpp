// Translation (src/translate/): greedy and beam search on random and trained models, the Translator and the `translate`
// command's formats, n-best lists and alignments.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "common/host.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/text.h"
#include "model/seq2seq.h"
#include "run/loaded_run.h"
#include "support.h"
#include "translate/alignment.h"
#include "translate/search.h"
#include "translate/translator.h"

using namespace attnmt;
using test::NoneRun;
using test::output_lines;
using test::tiny_none_run;
using test::tiny_run;

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
    if (beam == 1) {
      EXPECT_EQ(greedy_search(model, b, so, torch::kCPU).size(), 4u);  // never cancelled: runs whole
    }
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
      if (k > 0) {
        EXPECT_GE(hyps[k - 1].at("score").get<double>(), hyps[k].at("score").get<double>()) << lines[i];
      }
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
