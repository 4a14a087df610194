// BLEU cases with expected values derived by hand from the BLEU definition and sacreBLEU's defaults
// (13a tokenization, clipped counts against the max over references, closest reference length with
// ties to the shorter, "exp" smoothing: the k-th order without matches gets 100 / (2^k * total)).
#include <gtest/gtest.h>

#include <cmath>

#include "eval/bleu.h"

using attnmt::corpus_bleu;

TEST(Bleu, PerfectMatchIs100) {
  auto b = corpus_bleu({"the cat sat on the mat"}, {{"the cat sat on the mat"}});
  EXPECT_NEAR(b.score, 100.0, 1e-9);
  EXPECT_DOUBLE_EQ(b.bp, 1.0);
  EXPECT_EQ(b.sys_len, 6);
}

TEST(Bleu, EmptyHypothesisIsZero) {
  auto b = corpus_bleu({""}, {{"the cat"}});
  EXPECT_EQ(b.score, 0.0);
  EXPECT_EQ(b.sys_len, 0);
  EXPECT_EQ(b.ref_len, 2);
  EXPECT_EQ(b.bp, 0.0);
}

TEST(Bleu, NoTrigramsGivesZero) {
  // "the cat" has no 3-grams: sacreBLEU stops at the first order without n-grams, leaving p3 = p4 = 0.
  auto b = corpus_bleu({"the cat"}, {{"the cat sat"}});
  EXPECT_EQ(b.score, 0.0);
  EXPECT_DOUBLE_EQ(b.precisions[0], 100.0);
  EXPECT_DOUBLE_EQ(b.precisions[1], 100.0);
  EXPECT_EQ(b.precisions[2], 0.0);
}

TEST(Bleu, ExpSmoothingAndBrevityPenalty) {
  // hyp a b c d, ref a b x d e: 1-grams 3/4, 2-grams 1/3 (a b), 3-grams 0/2 -> 100/(2*2) = 25,
  // 4-grams 0/1 -> 100/(4*1) = 25; BP = exp(1 - 5/4).
  auto b = corpus_bleu({"a b c d"}, {{"a b x d e"}});
  ASSERT_EQ(b.precisions.size(), 4u);
  EXPECT_NEAR(b.precisions[0], 75.0, 1e-9);
  EXPECT_NEAR(b.precisions[1], 100.0 / 3, 1e-9);
  EXPECT_NEAR(b.precisions[2], 25.0, 1e-9);
  EXPECT_NEAR(b.precisions[3], 25.0, 1e-9);
  EXPECT_NEAR(b.bp, std::exp(-0.25), 1e-12);
  double expected = std::exp(-0.25) * std::pow(75.0 * (100.0 / 3) * 25.0 * 25.0, 0.25);  // = 27.53...
  EXPECT_NEAR(b.score, expected, 1e-9);
  EXPECT_NEAR(b.ratio, 0.8, 1e-12);
}

TEST(Bleu, ClippedCounts) {
  // hyp "the the the the", ref "the cat": 1-grams min(4, 1) = 1 of 4; 2-grams 0/3 -> 100/6;
  // 3-grams 0/2 -> 100/(4*2); 4-grams 0/1 -> 100/8. Hypothesis longer than the reference: BP = 1.
  auto b = corpus_bleu({"the the the the"}, {{"the cat"}});
  EXPECT_NEAR(b.precisions[0], 25.0, 1e-9);
  EXPECT_NEAR(b.precisions[1], 100.0 / 6, 1e-9);
  EXPECT_NEAR(b.precisions[2], 12.5, 1e-9);
  EXPECT_NEAR(b.precisions[3], 12.5, 1e-9);
  EXPECT_DOUBLE_EQ(b.bp, 1.0);
  EXPECT_NEAR(b.score, std::pow(25.0 * (100.0 / 6) * 12.5 * 12.5, 0.25), 1e-9);
}

TEST(Bleu, MultipleReferencesClosestLengthTiesToShorter) {
  // Refs of length 3 and 5 are both 1 away from the 4-token hypothesis: the shorter (3) counts, BP = 1.
  // Every n-gram of "a b c d" occurs in the second reference.
  auto b = corpus_bleu({"a b c d"}, {{"a b c"}, {"a b c d e"}});
  EXPECT_EQ(b.ref_len, 3);
  EXPECT_NEAR(b.score, 100.0, 1e-9);
  EXPECT_NE(b.signature.find("nrefs:2"), std::string::npos);
}

TEST(Bleu, Tokenizes13aBeforeCounting) {
  // 13a splits "Hello," and "world!" so both sides become the same tokens; without tokenization
  // "Hello," and "world!" do not match "Hello" and "world", so the score drops below 100.
  EXPECT_NEAR(corpus_bleu({"Hello, big world!"}, {{"Hello , big world !"}}).score, 100.0, 1e-9);
  attnmt::BleuOptions none;
  none.tokenize = "none";
  EXPECT_LT(corpus_bleu({"Hello, big world!"}, {{"Hello , big world !"}}, none).score, 100.0);
}

TEST(Bleu, CasingAndNonAscii) {
  attnmt::BleuOptions lc;
  lc.lowercase = true;
  EXPECT_NEAR(corpus_bleu({"Über die Straße gehen"}, {{"über die straße gehen"}}, lc).score, 100.0, 1e-9);
  // Case-sensitive: 1-grams "die", "gehen" match (2/4); 2-grams 0/3 -> 100/6; 3-grams 0/2 -> 100/8;
  // 4-grams 0/1 -> 100/8.
  auto b = corpus_bleu({"Über die Straße gehen"}, {{"über die straße gehen"}});
  EXPECT_NEAR(b.precisions[0], 50.0, 1e-9);
  EXPECT_NEAR(b.score, std::pow(50.0 * (100.0 / 6) * 12.5 * 12.5, 0.25), 1e-9);
}

TEST(Bleu, CorpusSumsStatisticsBeforeScoring) {
  // Sentence 1 matches fully (4/4, 3/3, 2/2, 1/1); sentence 2 "x y" vs "x z": 1/2, 0/1, no 3-/4-grams.
  // Sums: 5/6, 3/4, 2/2, 1/1; lengths 6 and 6.
  auto b = corpus_bleu({"a b c d", "x y"}, {{"a b c d", "x z"}});
  EXPECT_NEAR(b.score, std::pow((500.0 / 6) * 75.0 * 100.0 * 100.0, 0.25), 1e-9);
  EXPECT_EQ(b.sys_len, 6);
  EXPECT_EQ(b.ref_len, 6);
}

TEST(Bleu, MismatchedLineCountsThrow) {
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), std::invalid_argument);
}

TEST(Bleu, FormatLooksLikeSacreBleu) {
  auto b = corpus_bleu({"a b c d"}, {{"a b x d e"}});
  std::string f = b.format();
  EXPECT_EQ(f.rfind("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:", 0), 0u) << f;
  EXPECT_NE(f.find(" = 27.53 75.0/33.3/25.0/25.0 (BP = 0.779 ratio = 0.800 hyp_len = 4 ref_len = 5)"), std::string::npos) << f;
}
