#include <gtest/gtest.h>

#include <set>

#include "common/errors.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/text.h"
#include "data/toy_corpus.h"
#include "data/vocab.h"
#include "support.h"

using namespace attnmt;
using attnmt::test::temp_dir;
using attnmt::test::write_file;

namespace {
std::string expect_usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UsageError thrown";
  return "";
}
}  // namespace

TEST(Text, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("héllo wörld — ok"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(find_invalid_utf8("a\xc3"), 1u);          // truncated sequence
  EXPECT_EQ(find_invalid_utf8("\xc0\xaf"), 0u);       // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80"), 0u);   // surrogate
}

TEST(Text, Tokenize13aPunctuationAndNumbers) {
  // Rule 1 spaces out symbols; rules 2/3 split . and , except inside numbers; rule 4 splits a dash after a digit.
  EXPECT_EQ(tokenize_13a_string("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a_string("It costs $3.50, really."), "It costs $ 3.50 , really .");
  EXPECT_EQ(tokenize_13a_string("1,000 people"), "1,000 people");
  EXPECT_EQ(tokenize_13a_string("pages 10-20"), "pages 10 - 20");
  EXPECT_EQ(tokenize_13a_string("well-known"), "well-known");
  EXPECT_EQ(tokenize_13a_string("l'homme (grand)"), "l'homme ( grand )");
  EXPECT_EQ(tokenize_13a_string("a &amp; b &lt;c&gt; &quot;q&quot;"), "a & b < c > \" q \"");
  EXPECT_EQ(tokenize_13a_string("Wait..."), "Wait . . .");
  EXPECT_EQ(tokenize_13a_string("Straße, café."), "Straße , café .");
  // re.sub replaces non-overlapping matches, so a run of commas before a digit keeps the last one attached,
  // and 13a is not idempotent (values from the reference regexes in Python; found by fuzz_tokenizer).
  EXPECT_EQ(tokenize_13a_string("a,,,,5"), "a , , , ,5");
  EXPECT_EQ(tokenize_13a_string("a , , , ,5"), "a , , , , 5");
  EXPECT_EQ(tokenize_13a_string("0.,,,5 x"), "0 . , , , 5 x");
  EXPECT_EQ(tokenize_13a_string("  spaced   out  "), "spaced out");
  EXPECT_EQ(tokenize_13a_string(""), "");
}

TEST(Text, DetokenizeRoundTrip) {
  const std::vector<std::string> lines = {"Hello , world !", "Ein Mann ( alt ) sitzt .", "Il a 3,5 kg .",
                                          "Es kostet 3 . 5 Euro", "le chat noir dort ."};
  for (const auto& l : lines) {
    auto toks = split_whitespace(l);
    std::string text = detokenize(toks, TokenizerKind::k13a);
    EXPECT_EQ(tokenize(text, TokenizerKind::k13a, false), toks) << "detokenized: " << text;
  }
  EXPECT_EQ(detokenize({"Hello", ",", "world", "!"}, TokenizerKind::k13a), "Hello, world!");
  EXPECT_EQ(detokenize({"a", ",", "b"}, TokenizerKind::kSpace), "a , b");
}

TEST(Text, LowercaseHandlesAccents) {
  EXPECT_EQ(to_lower_utf8("ÉCOLE Über Ça ŒUVRE"), "école über ça œuvre");
  EXPECT_EQ(tokenize("The Cat.", TokenizerKind::k13a, true), (std::vector<std::string>{"the", "cat", "."}));
}

TEST(Vocab, BuildOrderMinFreqMaxSize) {
  std::vector<std::vector<std::string>> s = {{"b", "a", "c"}, {"a", "b", "d"}, {"a"}};
  Vocab v = Vocab::build(s, 1, 0);
  ASSERT_EQ(v.size(), 8);
  // a:3, b:2, then c and d (1 each) in byte order
  EXPECT_EQ(v.token(4), "a");
  EXPECT_EQ(v.token(5), "b");
  EXPECT_EQ(v.token(6), "c");
  EXPECT_EQ(v.token(7), "d");
  Vocab v2 = Vocab::build(s, 2, 0);
  ASSERT_EQ(v2.size(), 6);
  EXPECT_EQ(v2.id("c"), Vocab::kUnk);
  Vocab v3 = Vocab::build(s, 1, 1);
  ASSERT_EQ(v3.size(), 5);
  EXPECT_EQ(v3.token(4), "a");
}

TEST(Vocab, SaveLoadIdentical) {
  std::string dir = temp_dir("vocab");
  Vocab v = Vocab::build({{"über", "café", "x", "x"}}, 1, 0);
  v.save(dir + "/v.txt");
  Vocab w = Vocab::load(dir + "/v.txt");
  ASSERT_EQ(w.size(), v.size());
  for (int64_t i = 0; i < v.size(); ++i) EXPECT_EQ(w.token(i), v.token(i));
  EXPECT_EQ(w.encode({"café", "zzz"}), (std::vector<int64_t>{v.id("café"), Vocab::kUnk}));
  EXPECT_EQ(w.decode({v.id("x"), Vocab::kUnk, Vocab::kEos, v.id("x")}), (std::vector<std::string>{"x", "<unk>"}));
}

TEST(Vocab, LoadRejectsBadFiles) {
  std::string dir = temp_dir("vocab_bad");
  EXPECT_NE(expect_usage_error([&] { Vocab::load(dir + "/missing"); }).find("cannot open"), std::string::npos);
  write_file(dir + "/short", "<pad>\n<unk>\n");
  EXPECT_NE(expect_usage_error([&] { Vocab::load(dir + "/short"); }).find("not a vocabulary"), std::string::npos);
  write_file(dir + "/order", "<unk>\n<pad>\n<bos>\n<eos>\n");
  EXPECT_NE(expect_usage_error([&] { Vocab::load(dir + "/order"); }).find(":1:"), std::string::npos);
  write_file(dir + "/dup", "<pad>\n<unk>\n<bos>\n<eos>\na\na\n");
  EXPECT_NE(expect_usage_error([&] { Vocab::load(dir + "/dup"); }).find(":6: duplicate"), std::string::npos);
  write_file(dir + "/empty", "<pad>\n<unk>\n<bos>\n<eos>\n\n");
  EXPECT_NE(expect_usage_error([&] { Vocab::load(dir + "/empty"); }).find(":5: empty"), std::string::npos);
}

TEST(Corpus, ReadsParallelWithCrlf) {
  std::string dir = temp_dir("corpus");
  write_file(dir + "/a.src", "hello world\r\nbye\r\n");
  write_file(dir + "/a.tgt", "bonjour le monde\nau revoir");
  ParallelText p = read_parallel(dir + "/a.src", dir + "/a.tgt");
  ASSERT_EQ(p.src.size(), 2u);
  ASSERT_EQ(p.tgt.size(), 2u);
  EXPECT_EQ(p.src[0], "hello world");
  EXPECT_EQ(p.tgt[1], "au revoir");
}

TEST(Corpus, BadInputsNameFileAndLine) {
  std::string dir = temp_dir("corpus_bad");
  write_file(dir + "/a", "x\ny\nz\n");
  write_file(dir + "/b", "x\ny\n");
  std::string m = expect_usage_error([&] { read_parallel(dir + "/a", dir + "/b"); });
  EXPECT_NE(m.find("3 lines"), std::string::npos) << m;
  EXPECT_NE(m.find("2"), std::string::npos) << m;
  m = expect_usage_error([&] { read_parallel(dir + "/missing", dir + "/b"); });
  EXPECT_NE(m.find("missing: cannot open"), std::string::npos) << m;
  write_file(dir + "/bad_utf8", "ok\nbad \xff here\n");
  m = expect_usage_error([&] { read_lines(dir + "/bad_utf8"); });
  EXPECT_NE(m.find("bad_utf8:2: invalid UTF-8"), std::string::npos) << m;
  write_file(dir + "/t.tsv", "a\tb\tc\nno tab here\n");
  m = expect_usage_error([&] { read_tsv(dir + "/t.tsv"); });
  EXPECT_NE(m.find("t.tsv:2: no tab"), std::string::npos) << m;
}

TEST(Corpus, TsvIgnoresExtraColumnsAndFilteringCounts) {
  std::string dir = temp_dir("corpus_tsv");
  write_file(dir + "/t.tsv", "Go.\tVa !\tCC-BY attribution\n\nA B C D E F\tx\nHi.\tSalut.\n");
  ParallelText p = read_tsv(dir + "/t.tsv");
  ASSERT_EQ(p.src.size(), 4u);
  EXPECT_EQ(p.tgt[0], "Va !");
  TokenizedCorpus c = tokenize_corpus(p, Tokenizer(TokenizerKind::k13a, false), 5);
  EXPECT_EQ(c.stats.read, 4);
  EXPECT_EQ(c.stats.dropped_empty, 1);
  EXPECT_EQ(c.stats.dropped_long, 1);
  ASSERT_EQ(c.examples.size(), 2u);
  EXPECT_EQ(c.examples[1].line, 3);
  EXPECT_EQ(c.examples[0].src, (std::vector<std::string>{"Go", "."}));
  write_file(dir + "/e.tsv", "\n\n");
  std::string m = expect_usage_error([&] { tokenize_corpus(read_tsv(dir + "/e.tsv"), Tokenizer(TokenizerKind::k13a, false), 5); });
  EXPECT_NE(m.find("no sentence pairs left"), std::string::npos) << m;
}

TEST(Corpus, PharaohParsing) {
  Alignment a = parse_pharaoh("0-0 2-1 1-3", "x");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1], std::make_pair(2, 1));
  EXPECT_EQ(format_pharaoh(a), "0-0 2-1 1-3");
  for (std::string bad : {"0-", "-1", "a-b", "1-2-3", "12", "1--2"}) EXPECT_THROW(parse_pharaoh(bad, "x"), UsageError) << bad;
  std::string dir = temp_dir("align");
  write_file(dir + "/a.align", "0-0 1-1\n0-5\n");
  std::vector<size_t> sl = {2, 2}, tl = {2, 2};
  std::string m = expect_usage_error([&] { read_alignments(dir + "/a.align", &sl, &tl); });
  EXPECT_NE(m.find("a.align:2: target index 5 out of range"), std::string::npos) << m;
  // prefix mode: the first line only (the bad second line is not used); too few lines is an error.
  std::vector<size_t> one = {2};
  auto first = read_alignments(dir + "/a.align", &one, &one, true);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].size(), 2u);
  EXPECT_EQ(first[0][1], std::make_pair(1, 1));
  std::vector<size_t> three = {2, 2, 2};
  EXPECT_THROW(read_alignments(dir + "/a.align", &three, &three, true), UsageError);
}

TEST(Batcher, TokenBatchesStayWithinTheBoundAndCoverEverySentenceOnce) {
  std::vector<EncodedPair> data;
  for (int i = 0; i < 300; ++i) {
    const size_t len = 1 + static_cast<size_t>((i * 7) % 40);
    data.push_back({std::vector<int64_t>(len, 5), std::vector<int64_t>(len + static_cast<size_t>(i % 3), 6)});
  }
  data.push_back({std::vector<int64_t>(3, 5), std::vector<int64_t>(120, 6)});  // longer than the bound: alone
  const int64_t bound = 100;
  const auto plan = make_batch_plan(data, 32, 7, 0, true, 50, bound);
  const auto again = make_batch_plan(data, 32, 7, 0, true, 50, bound);
  ASSERT_EQ(plan.size(), again.size());
  EXPECT_EQ(plan, again);
  EXPECT_NE(plan, make_batch_plan(data, 32, 7, 1, true, 50, bound));
  std::vector<int> seen(data.size(), 0);
  size_t short_batch_sentences = 0, short_batches = 0;
  for (const auto& b : plan) {
    ASSERT_FALSE(b.empty());
    size_t longest = 0;
    for (int64_t i : b) {
      ++seen[static_cast<size_t>(i)];
      longest = std::max(longest, data[static_cast<size_t>(i)].tgt.size() + 1);
    }
    if (b.size() > 1) {
      EXPECT_LE(static_cast<int64_t>(b.size() * longest), bound);
    }
    if (longest > static_cast<size_t>(bound)) {
      EXPECT_EQ(b.size(), 1u);
    }
    if (longest <= 10) short_batch_sentences += b.size(), ++short_batches;
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << i;
  // Short sentences make batches of many sentences, long ones of few (bound 100, targets of at most 10 tokens
  // with <eos>: up to 10 per batch)
  ASSERT_GT(short_batches, 0u);
  EXPECT_GE(static_cast<double>(short_batch_sentences) / static_cast<double>(short_batches), 5.0);
}

TEST(Batcher, DeterministicPlansAndMasks) {
  std::vector<EncodedPair> data;
  for (int i = 0; i < 100; ++i) data.push_back({std::vector<int64_t>(1 + i % 13, 5), std::vector<int64_t>(1 + i % 7, 6)});
  auto p1 = make_batch_plan(data, 8, 42, 0, true);
  auto p2 = make_batch_plan(data, 8, 42, 0, true);
  auto p3 = make_batch_plan(data, 8, 42, 1, true);
  ASSERT_EQ(p1.size(), p2.size());
  EXPECT_EQ(p1, p2);
  EXPECT_NE(p1, p3);
  std::set<int64_t> all;
  for (auto& b : p1) all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), data.size());  // every example exactly once
  auto unsorted = make_batch_plan(data, 8, 42, 0, true, 1);
  EXPECT_LT(padding_fraction(data, p1), padding_fraction(data, unsorted));

  Batch b = make_batch(data, {0, 5, 12});
  ASSERT_EQ(b.src.sizes(), (std::vector<int64_t>{3, 13}));
  EXPECT_EQ(b.src_len[1].item<int64_t>(), 6);
  EXPECT_EQ(b.src_mask.sum().item<int64_t>(), 1 + 6 + 13);
  EXPECT_EQ(b.tgt_in[0][0].item<int64_t>(), Vocab::kBos);
  // example 5 has 6 target tokens: tgt_out = y1..y6 <eos> then padding
  EXPECT_EQ(b.tgt_out[1][6].item<int64_t>(), Vocab::kEos);
  EXPECT_EQ(b.tgt_mask[1].sum().item<int64_t>(), 7);
  EXPECT_EQ(b.tgt_tokens, (1 + 1) + (6 + 1) + (6 + 1));
}

TEST(ToyCorpus, DeterministicFiles) {
  ToyCorpusOptions o;
  o.train = 50;
  o.valid = 12;
  o.test = 12;
  std::string a = temp_dir("toy_a"), b = temp_dir("toy_b"), c = temp_dir("toy_c");
  write_toy_corpus(a, o);
  write_toy_corpus(b, o);
  o.seed = 2;
  write_toy_corpus(c, o);
  for (std::string f : {"train.en", "train.fr", "train.align", "test.en", "test.fr", "test.align"}) {
    std::string x = test::read_file(a + "/" + f);
    EXPECT_FALSE(x.empty()) << f;
    EXPECT_EQ(x, test::read_file(b + "/" + f)) << f;
  }
  EXPECT_NE(test::read_file(a + "/train.en"), test::read_file(c + "/train.en"));
}

// The word-order probe: each pair is the same words with the two nouns swapped, on both sides, and `corpus` writes it.
TEST(ToyCorpus, WordOrderProbePairsSwapTwoNouns) {
  const auto probe = toy_word_order_probe(kToyProbePairs, 1);
  ASSERT_EQ(probe.size(), static_cast<size_t>(kToyProbePairs));
  std::set<std::string> sentences;
  for (const auto& [x, y] : probe) {
    ASSERT_EQ(x.en.size(), 6u);
    ASSERT_EQ(y.en.size(), 6u);
    ASSERT_EQ(x.fr.size(), 6u);
    ASSERT_EQ(y.fr.size(), 6u);
    EXPECT_NE(x.en[1], x.en[4]);
    EXPECT_EQ(x.en[1], y.en[4]);
    EXPECT_EQ(x.en[4], y.en[1]);
    EXPECT_EQ(x.en[2], y.en[2]);  // the same verb form: both nouns have the same number
    EXPECT_EQ(x.fr[1], y.fr[4]);
    EXPECT_EQ(x.fr[0], y.fr[3]);  // the article follows its noun's gender
    EXPECT_TRUE(toy_content_word_fr(x.fr[1]) && toy_content_word_fr(x.fr[2]) && toy_content_word_fr(x.fr[4]));
    EXPECT_TRUE(sentences.insert(x.en[0] + " " + x.en[1] + " " + x.en[2] + " " + x.en[4]).second) << "a repeated sentence";
  }
  ToyCorpusOptions o;
  o.train = 30;
  o.valid = o.test = 10;
  const std::string dir = temp_dir("toy_probe");
  write_toy_corpus(dir, o);
  const std::string en = test::read_file(dir + "/probe.en");
  EXPECT_EQ(std::count(en.begin(), en.end(), '\n'), 2 * kToyProbePairs);
  EXPECT_EQ(en.substr(0, en.find('\n')), "the " + probe[0].first.en[1] + " " + probe[0].first.en[2] + " the " + probe[0].first.en[4] + " .");
}

TEST(ToyCorpus, AlignmentsValidAndLengthsCoverBuckets) {
  ToyCorpusOptions o;
  auto pairs = generate_toy_pairs(600, o, 7);
  ASSERT_EQ(pairs.size(), 600u);
  std::vector<int> per_bucket(6, 0);
  int crossings = 0;
  for (const auto& p : pairs) {
    int n = static_cast<int>(p.en.size());
    ASSERT_GE(n, o.min_len);
    ASSERT_LE(n, o.max_len);
    ++per_bucket[static_cast<size_t>((n - 1) / 10)];
    std::vector<int> covered(p.fr.size(), 0);
    for (auto [i, j] : p.align) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ASSERT_GE(j, 0);
      ASSERT_LT(j, static_cast<int>(p.fr.size()));
      covered[static_cast<size_t>(j)] = 1;
    }
    for (size_t j = 0; j < covered.size(); ++j) ASSERT_EQ(covered[j], 1) << "French token " << j << " unaligned";
    for (size_t x = 0; x < p.align.size(); ++x)
      for (size_t y = 0; y < p.align.size(); ++y)
        if (p.align[x].first < p.align[y].first && p.align[x].second > p.align[y].second) ++crossings;
  }
  for (int c : per_bucket) EXPECT_EQ(c, 100);
  EXPECT_GT(crossings, 100);  // post-nominal adjectives and adverbs reorder
}

TEST(ToyCorpus, ArticlesAgreeWithNounGender) {
  // A feminine article never stands right before a masculine noun and vice versa.
  const std::set<std::string> masc = {"chat", "chien", "livre", "jardin", "sac", "lit", "pont", "garçon", "roi"};
  const std::set<std::string> fem = {"fille", "maison", "voiture", "table", "porte", "reine", "vache"};
  const std::set<std::string> fem_art = {"la", "une", "cette", "ma"}, masc_art = {"le", "un", "ce", "mon", "du"};
  ToyCorpusOptions o;
  auto pairs = generate_toy_pairs(3000, o, 3);
  int checked = 0;
  for (const auto& p : pairs)
    for (size_t j = 0; j + 1 < p.fr.size(); ++j) {
      if (masc.count(p.fr[j + 1])) {
        EXPECT_EQ(fem_art.count(p.fr[j]), 0u) << p.fr[j] << " " << p.fr[j + 1];
        checked += masc_art.count(p.fr[j]) ? 1 : 0;
      }
      if (fem.count(p.fr[j + 1])) {
        EXPECT_EQ(masc_art.count(p.fr[j]), 0u) << p.fr[j] << " " << p.fr[j + 1];
        checked += fem_art.count(p.fr[j]) ? 1 : 0;
      }
    }
  EXPECT_GT(checked, 100);
}

TEST(SharedData, Multi30kLoadsTokenizesAndBatches) {
  std::string shared = test::shared_data_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared/data not found next to the checkout: skipping the Multi30k test";
  ParallelText p = read_parallel(shared + "/multi30k/val.de", shared + "/multi30k/val.en");
  ASSERT_EQ(p.src.size(), 1014u);
  TokenizedCorpus c = tokenize_corpus(p, Tokenizer(TokenizerKind::k13a, false), 80);
  EXPECT_GT(c.examples.size(), 1000u);
  Vocab sv = Vocab::build([&] {
    std::vector<std::vector<std::string>> s;
    for (auto& e : c.examples) s.push_back(e.src);
    return s;
  }(), 1, 0);
  EXPECT_GT(sv.size(), 1000);
  std::vector<EncodedPair> enc;
  for (auto& e : c.examples) enc.push_back({sv.encode(e.src), sv.encode(e.tgt)});
  auto plan = make_batch_plan(enc, 32, 1, 0, true);
  EXPECT_LT(padding_fraction(enc, plan), 0.15);
  Batch b = make_batch(enc, plan[0]);
  EXPECT_EQ(b.src.size(0), static_cast<int64_t>(plan[0].size()));
  ParallelText t = read_tsv(shared + "/tatoeba-eng-fra/eng-fra.txt");
  EXPECT_EQ(t.src.size(), 5000u);
}
