// Subword units (SentencePiece through the attnmt-spm helper), word-level views of piece-level maps,
// byte-order marks, and what bad SentencePiece input does.
#include <filesystem>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "common/errors.h"
#include "data/corpus.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "data/vocab.h"
#include "eval/bleu.h"
#include "eval/evaluator.h"
#include "run/run_dir.h"
#include "support.h"
#include "train/trainer.h"

namespace attnmt {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::read_file;
using test::run_cli;
using test::write_file;

const std::string& toy_piece_model() {
  static const std::string bytes = [] {
    SpmTrainOptions o;
    o.vocab_size = 200;
    return train_sentencepiece(read_lines(test::source_dir() + "/data/toy/train.en"), o, "test");
  }();
  return bytes;
}

// SentencePiece's normalisation of a line: runs of spaces collapsed, no space at either end.
std::string collapse_spaces(const std::string& s) {
  std::string out;
  for (const auto& w : split_whitespace(s)) out += (out.empty() ? "" : " ") + w;
  return out;
}

TEST(SentencePiece, RoundTripOnTheShippedCorpusAndNonAsciiText) {
  const Tokenizer tok = Tokenizer::pieces(toy_piece_model(), toy_piece_model(), false);
  ASSERT_TRUE(tok.subword());
  const std::vector<std::string> lines = read_lines(test::source_dir() + "/data/toy/test.en");
  ASSERT_GT(lines.size(), 100u);
  size_t split_words = 0;
  for (const auto& l : lines) {
    const auto pieces = tok.encode(l, Side::kSource);
    ASSERT_FALSE(pieces.empty()) << l;
    EXPECT_EQ(tok.decode(pieces, Side::kSource), collapse_spaces(l));
    const auto words = tok.join_words(pieces);
    EXPECT_EQ(words, split_whitespace(l)) << l;
    split_words += pieces.size() - words.size();
  }
  EXPECT_GT(split_words, 0u) << "200 pieces cannot spell every word of the corpus whole";
  // Characters the English training text never showed: kept through <unk> runs, never lost silently.
  for (const std::string l : {"the cat sleeps .", "  the   dog  ", "café au lait", "Übermäßig große Straße"}) {
    const auto pieces = tok.encode(l, Side::kSource);
    const std::string back = tok.decode(pieces, Side::kSource);
    if (std::find(pieces.begin(), pieces.end(), "<unk>") == pieces.end()) {
      EXPECT_EQ(back, collapse_spaces(l));
    } else {
      EXPECT_NE(back.find("<unk>"), std::string::npos) << back;
    }
  }
}

TEST(SentencePiece, NonAsciiRoundTripWithAModelThatKnowsTheCharacters) {
  std::vector<std::string> text;
  for (int i = 0; i < 40; ++i)
    for (const std::string l : {"Übermäßig große Straße in München", "un café très élégant à Noël", "naïve façade, œuvre complète"})
      text.push_back(l);
  SpmTrainOptions o;
  o.vocab_size = 40;  // what this little text allows: its 38 characters and the specials
  const std::string m = train_sentencepiece(text, o, "test");
  const Tokenizer tok = Tokenizer::pieces(m, m, false);
  for (const std::string l : {"Übermäßig große Straße", "un café à Noël", "œuvre naïve"}) {
    const auto pieces = tok.encode(l, Side::kTarget);
    EXPECT_EQ(std::count(pieces.begin(), pieces.end(), "<unk>"), 0) << l;
    EXPECT_EQ(tok.decode(pieces, Side::kTarget), l);
  }
  // Lowercasing happens before the pieces.
  const Tokenizer lower = Tokenizer::pieces(m, m, true);
  EXPECT_EQ(lower.decode(lower.encode("ÜBERMÄßIG Große", Side::kSource), Side::kSource), "übermäßig große");
}

TEST(SentencePiece, TrainingIsDeterministicAndRefusesTooManyPieces) {
  const std::vector<std::string> lines = read_lines(test::source_dir() + "/data/toy/train.en");
  SpmTrainOptions o;
  o.vocab_size = 200;
  EXPECT_EQ(train_sentencepiece(lines, o, "test"), toy_piece_model());
  o.model_type = "bpe";
  const std::string bpe = train_sentencepiece(lines, o, "test");
  EXPECT_NE(bpe, toy_piece_model());
  o.vocab_size = 100000;
  try {
    train_sentencepiece(lines, o, "data.spm.vocab_size");
    FAIL() << "a vocabulary larger than the text allows was accepted";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("data.spm.vocab_size: ", 0), 0u) << m;
    EXPECT_NE(m.find("100000"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(SentencePiece, WordLevelMapSumsSourcePiecesAndAveragesTargetPieces) {
  // source pieces: ▁the ▁cat s ▁sleep  -> words: the | cats | sleep
  // target pieces: ▁le ▁chat s         -> words: le | chats ; plus the <eos> row
  const Tokenizer tok = Tokenizer::pieces(toy_piece_model(), toy_piece_model(), false);
  const std::vector<std::string> src = {"\xE2\x96\x81the", "\xE2\x96\x81" "cat", "s", "\xE2\x96\x81sleep"};
  const std::vector<std::string> tgt = {"\xE2\x96\x81le", "\xE2\x96\x81" "chat", "s"};
  const std::vector<int> sw = tok.word_index(src), tw = tok.word_index(tgt);
  ASSERT_EQ(sw, (std::vector<int>{0, 1, 1, 2}));
  ASSERT_EQ(tw, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(tok.join_words(src), (std::vector<std::string>{"the", "cats", "sleep"}));
  // a lone marker at the end (or before another word) starts no word of its own
  EXPECT_EQ(tok.word_index({"\xE2\x96\x81la", "\xE2\x96\x81"}), (std::vector<int>{0, 0}));
  EXPECT_EQ(tok.word_index({"\xE2\x96\x81", "la", "\xE2\x96\x81", "\xE2\x96\x81le"}), (std::vector<int>{0, 0, 0, 1}));
  const std::vector<std::vector<float>> w = {
      {0.7f, 0.1f, 0.1f, 0.1f},  // ▁le
      {0.1f, 0.5f, 0.2f, 0.2f},  // ▁chat
      {0.0f, 0.2f, 0.6f, 0.2f},  // s
      {0.1f, 0.1f, 0.1f, 0.7f},  // <eos>
  };
  const auto m = word_level_map(w, sw, tw);
  const std::vector<std::vector<float>> expect = {
      {0.7f, 0.2f, 0.1f},           // le: columns cat+s added
      {0.05f, 0.75f, 0.2f},         // chats: mean of (0.1, 0.7, 0.2) and (0.0, 0.8, 0.2)
      {0.1f, 0.2f, 0.7f},           // <eos> row kept
  };
  ASSERT_EQ(m.size(), expect.size());
  for (size_t r = 0; r < m.size(); ++r) {
    ASSERT_EQ(m[r].size(), expect[r].size()) << r;
    float sum = 0;
    for (size_t c = 0; c < m[r].size(); ++c) {
      EXPECT_NEAR(m[r][c], expect[r][c], 1e-6) << r << "," << c;
      sum += m[r][c];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6) << r;
  }
  // Word-level tokenizers: the identity.
  const Tokenizer words(TokenizerKind::kSpace, false);
  EXPECT_EQ(words.word_index({"a", "b", "c"}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(word_level_map(w, {0, 1, 2, 3}, {0, 1, 2}), w);
}

TEST(SentencePiece, TinyModelTrainsAndTranslatesWithPiecesEndToEnd) {
  const std::string corpus = test::tiny_toy_corpus("spm_corpus", 96, 8, 12, 12);
  Config c = test::tiny_config_for(corpus, test::temp_dir("spm_run"), "bahdanau");
  c.data.tokenizer = "sentencepiece";
  c.data.spm.vocab_size = 120;
  c.data.spm.joint = true;
  c.train.epochs = 2;
  c.train.batch_size = 16;
  c.eval.beam_size = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  const RunDir dir(c.run_dir);
  ASSERT_TRUE(fs::is_regular_file(dir.src_spm()));
  ASSERT_TRUE(fs::is_regular_file(dir.tgt_spm()));
  EXPECT_EQ(read_file(dir.src_spm()), read_file(dir.tgt_spm())) << "a joint model serves both sides";
  // The vocabularies hold pieces.
  const Vocab tv = Vocab::load(dir.tgt_vocab());
  const auto& toks = tv.tokens();
  EXPECT_TRUE(std::any_of(toks.begin(), toks.end(), [](const std::string& t) { return t.rfind("\xE2\x96\x81", 0) == 0; }));

  const CliResult r = run_cli("translate -r " + c.run_dir + " -i " + corpus + "/test.en --alignment hard");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<std::string> src = read_lines(corpus + "/test.en");
  std::vector<std::string> out;
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);)
    if (l.find(" ||| ") != std::string::npos) out.push_back(l);
  ASSERT_EQ(out.size(), src.size()) << r.output;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string text = out[i].substr(0, out[i].find(" ||| "));
    EXPECT_EQ(text.find("\xE2\x96\x81"), std::string::npos) << out[i];
    EXPECT_EQ(text.find("<unk>"), std::string::npos) << out[i];
    // Alignments are between words of the source line and of the output.
    const size_t n_src = split_whitespace(src[i]).size(), n_out = split_whitespace(text).size();
    const Alignment a = parse_pharaoh(out[i].substr(out[i].find(" ||| ") + 5), "translate output");
    EXPECT_FALSE(a.empty()) << out[i];
    for (const auto& [s, t] : a) {
      EXPECT_LT(static_cast<size_t>(s), n_src) << out[i];
      EXPECT_LT(static_cast<size_t>(t), n_out) << out[i];
    }
  }

  // evaluate: BLEU on detokenized text, lowercased BLEU, no <unk>, AER from word-level maps.
  LoadedRun run = load_run(c.run_dir, "best", "cpu");
  ASSERT_TRUE(run.tok.subword());
  EvalRequest req;
  const EvalResult e = evaluate_run(run, c.run_dir, req);
  EXPECT_EQ(e.sentences, 12);
  EXPECT_EQ(e.unk_rate, 0.0);
  ASSERT_TRUE(e.aer.has_value());
  EXPECT_GE(*e.aer, 0.0);
  EXPECT_LE(*e.aer, 1.0);
  const std::vector<std::string> hyps = read_lines(dir.eval_hyp("test"));
  ASSERT_EQ(hyps.size(), 12u);
  for (const auto& h : hyps) EXPECT_EQ(h.find("\xE2\x96\x81"), std::string::npos) << h;
  BleuOptions lc;
  lc.lowercase = true;
  EXPECT_DOUBLE_EQ(e.bleu_lc, corpus_bleu(hyps, {read_lines(corpus + "/test.fr")}, lc).score);
  EXPECT_DOUBLE_EQ(EvalResult::from_json(e.to_json()).bleu_lc, e.bleu_lc);

  // attention: a piece-level and a word-level map per sentence; rows of both sum to 1.
  const std::string maps = corpus + "/maps";
  const CliResult a = run_cli("attention -r " + c.run_dir + " --src " + corpus + "/test.en --ref " + corpus + "/test.fr --align " +
                              corpus + "/test.align --limit 2 --format json,html -o " + maps);
  ASSERT_EQ(a.code, 0) << a.output;
  for (const std::string name : {"0001", "0001.words", "0002", "0002.words"}) {
    SCOPED_TRACE(name);
    const auto j = nlohmann::json::parse(read_file(maps + "/" + name + ".json"));
    const auto& w = j.at("weights");
    ASSERT_GT(w.size(), 0u);
    for (const auto& row : w) {
      double sum = 0;
      for (const auto& x : row) sum += x.get<double>();
      EXPECT_NEAR(sum, 1.0, 1e-4);
    }
  }
  const auto words = nlohmann::json::parse(read_file(maps + "/0001.words.json"));
  EXPECT_EQ(words.at("src_tokens").size(), split_whitespace(src[0]).size());
  EXPECT_NE(read_file(maps + "/index.html").find("0001.words"), std::string::npos);

  // Resume reads the run's models, it does not train new ones.
  write_file(dir.src_spm(), read_file(dir.src_spm()));  // same bytes; a retraining would rewrite both files
  const auto before = fs::last_write_time(dir.tgt_spm());
  Config more = c;
  more.train.epochs = 3;
  TrainOptions resume;
  resume.resume = true;
  train(more, resume, torch::kCPU);
  EXPECT_EQ(fs::last_write_time(dir.tgt_spm()), before);
}

TEST(ByteOrderMark, EveryReaderRemovesIt) {
  const std::string d = test::temp_dir("bom");
  const std::string bom = "\xEF\xBB\xBF";
  // line-aligned corpus files, TSV, alignments
  write_file(d + "/a.en", bom + "the cat\nthe dog\n");
  EXPECT_EQ(read_lines(d + "/a.en"), (std::vector<std::string>{"the cat", "the dog"}));
  write_file(d + "/a.tsv", bom + "the cat\tle chat\n");
  const ParallelText t = read_tsv(d + "/a.tsv");
  ASSERT_EQ(t.src.size(), 1u);
  EXPECT_EQ(t.src[0], "the cat");
  write_file(d + "/a.align", bom + "0-0 1-1\n");
  const auto al = read_alignments(d + "/a.align");
  ASSERT_EQ(al.size(), 1u);
  EXPECT_EQ(format_pharaoh(al[0]), "0-0 1-1");
  // only at the start of a file: a BOM inside a line is text
  write_file(d + "/b.en", "x\n" + bom + "y\n");
  EXPECT_EQ(read_lines(d + "/b.en")[1], bom + "y");
  // vocabulary
  Vocab v = Vocab::build({{"cat", "dog"}}, 1, 0);
  v.save(d + "/v.vocab");
  write_file(d + "/v.vocab", bom + read_file(d + "/v.vocab"));
  const Vocab back = Vocab::load(d + "/v.vocab");
  ASSERT_EQ(back.size(), v.size());
  EXPECT_EQ(back.id("<pad>"), Vocab::kPad);
  EXPECT_EQ(back.id("cat"), v.id("cat"));
  // config JSON
  write_file(d + "/c.json", bom + "{\"run_dir\": \"x\"}");
  EXPECT_EQ(read_json_file(d + "/c.json").at("run_dir"), "x");
}

TEST(ByteOrderMark, TranslateInputWithAndWithoutItGivesTheSameOutput) {
  // The shared tiny run of test_eval would do; a small one of our own keeps this file standalone.
  const std::string corpus = test::tiny_toy_corpus("bom_corpus", 48, 6, 6, 10);
  Config c = test::tiny_config_for(corpus, test::temp_dir("bom_run"), "bahdanau");
  c.train.epochs = 1;
  validate(c);
  train(c, {}, torch::kCPU);
  const std::vector<std::string> src = read_lines(corpus + "/test.en");
  ASSERT_FALSE(src.empty());
  const std::string plain = write_file(corpus + "/plain.txt", src[0] + "\n");
  const std::string marked = write_file(corpus + "/marked.txt", "\xEF\xBB\xBF" + src[0] + "\n");
  for (const std::string how : {"stdin", "file"}) {
    SCOPED_TRACE(how);
    const CliResult a = how == "stdin" ? run_cli("--log-level warn translate -r " + c.run_dir, plain)
                                       : run_cli("--log-level warn translate -r " + c.run_dir + " -i " + plain);
    const CliResult b = how == "stdin" ? run_cli("--log-level warn translate -r " + c.run_dir, marked)
                                       : run_cli("--log-level warn translate -r " + c.run_dir + " -i " + marked);
    ASSERT_EQ(a.code, 0) << a.output;
    ASSERT_EQ(b.code, 0) << b.output;
    EXPECT_FALSE(a.output.empty());
    EXPECT_EQ(a.output, b.output);
  }
}

}  // namespace
}  // namespace attnmt
