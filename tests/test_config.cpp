#include <gtest/gtest.h>

#include "common/config.h"
#include "common/errors.h"
#include "support.h"

using attnmt::Config;
using attnmt::UsageError;
using nlohmann::json;

namespace {

// Expects parsing to fail with a message that contains every fragment given.
void expect_bad(const json& j, const std::vector<std::string>& fragments) {
  try {
    attnmt::config_from_json(j);
    FAIL() << "config accepted: " << j.dump();
  } catch (const UsageError& e) {
    std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message '" << msg << "' lacks '" << f << "'";
  }
}

}  // namespace

TEST(Config, DefaultsAreValid) {
  Config c = attnmt::config_from_json(json::object());
  EXPECT_EQ(c.model.attention.type, "bahdanau");
  EXPECT_EQ(c.data.tokenizer, "13a");
  EXPECT_EQ(c.eval.buckets.size(), 6u);
}

TEST(Config, ReadsNestedValues) {
  json j = json::parse(R"({"run_dir":"r","model":{"rnn":"lstm","hidden_dim":32,"attention":{"type":"luong","score":"dot"}},
    "train":{"lr":0.01,"early_stopping":{"metric":"ppl","patience":3}},"eval":{"buckets":[5,15]}})");
  Config c = attnmt::config_from_json(j);
  EXPECT_EQ(c.run_dir, "r");
  EXPECT_EQ(c.model.rnn, "lstm");
  EXPECT_EQ(c.model.hidden_dim, 32);
  EXPECT_EQ(c.model.attention.score, "dot");
  EXPECT_DOUBLE_EQ(c.train.lr, 0.01);
  EXPECT_EQ(c.train.early_stopping.metric, "ppl");
  EXPECT_EQ(c.train.early_stopping.patience, 3);
  ASSERT_EQ(c.eval.buckets.size(), 2u);
  EXPECT_EQ(c.eval.buckets[1], 15);
}

TEST(Config, RoundTripsThroughJson) {
  json j = json::parse(R"({"model":{"attention":{"type":"scaled_dot","heads":4}},"data":{"train":{"tsv":"x.tsv"}}})");
  Config c = attnmt::config_from_json(j);
  json out = attnmt::config_to_json(c);
  Config c2 = attnmt::config_from_json(out);
  EXPECT_EQ(attnmt::config_to_json(c2).dump(), out.dump());
  EXPECT_EQ(c2.model.attention.heads, 4);
  EXPECT_EQ(c2.data.train.tsv, "x.tsv");
}

TEST(Config, UnknownKeyNamesPathAndValidKeys) {
  expect_bad(json::parse(R"({"model":{"hiden_dim":3}})"), {"model.hiden_dim", "unknown key", "hidden_dim"});
}
TEST(Config, UnknownTopLevelKey) { expect_bad(json::parse(R"({"modle":{}})"), {"modle", "unknown key"}); }
TEST(Config, WrongTypeInteger) {
  expect_bad(json::parse(R"({"model":{"hidden_dim":"big"}})"), {"model.hidden_dim", "expected an integer"});
}
TEST(Config, FloatWhereIntegerExpected) {
  expect_bad(json::parse(R"({"train":{"batch_size":3.5}})"), {"train.batch_size", "integer"});
}
TEST(Config, WrongTypeBool) {
  expect_bad(json::parse(R"({"model":{"bidirectional":1}})"), {"model.bidirectional", "true or false"});
}
TEST(Config, SectionNotObject) { expect_bad(json::parse(R"({"train":[]})"), {"train", "expected an object"}); }
TEST(Config, BadEnumListsChoices) {
  expect_bad(json::parse(R"({"model":{"attention":{"type":"bahdanu"}}})"),
             {"model.attention.type", "bahdanu", "none, bahdanau, luong, scaled_dot"});
}
TEST(Config, BadRnn) { expect_bad(json::parse(R"({"model":{"rnn":"rnn"}})"), {"model.rnn", "gru, lstm"}); }
TEST(Config, NegativeDropout) { expect_bad(json::parse(R"({"model":{"dropout":-0.1}})"), {"model.dropout"}); }
TEST(Config, DropoutOne) { expect_bad(json::parse(R"({"model":{"dropout":1.0}})"), {"model.dropout"}); }
TEST(Config, ZeroBatch) { expect_bad(json::parse(R"({"train":{"batch_size":0}})"), {"train.batch_size"}); }
TEST(Config, NegativeLr) { expect_bad(json::parse(R"({"train":{"lr":-1}})"), {"train.lr", "> 0"}); }
TEST(Config, ScoreForBahdanau) {
  expect_bad(json::parse(R"({"model":{"attention":{"type":"bahdanau","score":"dot"}}})"),
             {"model.attention.score", "only applies to type 'luong'"});
}
TEST(Config, HeadsNotDividingDim) {
  expect_bad(json::parse(R"({"model":{"hidden_dim":30,"attention":{"type":"scaled_dot","heads":4}}})"),
             {"model.attention.heads", "do not divide", "30"});
}
TEST(Config, HeadsForLuong) {
  expect_bad(json::parse(R"({"model":{"attention":{"type":"luong","heads":2}}})"), {"model.attention.heads", "scaled_dot"});
}
TEST(Config, InputFeedingForNone) {
  expect_bad(json::parse(R"({"model":{"input_feeding":true,"attention":{"type":"none"}}})"), {"model.input_feeding"});
}
TEST(Config, OddHiddenBidirectional) {
  expect_bad(json::parse(R"({"model":{"hidden_dim":33,"bidirectional":true}})"), {"model.hidden_dim", "even"});
}
TEST(Config, BucketsNotIncreasing) {
  expect_bad(json::parse(R"({"eval":{"buckets":[10,5]}})"), {"eval.buckets[1]", "increasing"});
}
TEST(Config, BucketsWrongElementType) {
  expect_bad(json::parse(R"({"eval":{"buckets":[10,"x"]}})"), {"eval.buckets[1]", "integer"});
}
TEST(Config, TsvAndSrcTogether) {
  expect_bad(json::parse(R"({"data":{"train":{"tsv":"a","src":"b","tgt":"c"}}})"), {"data.train.tsv", "not both"});
}
TEST(Config, SrcWithoutTgt) { expect_bad(json::parse(R"({"data":{"valid":{"src":"a"}}})"), {"data.valid.tgt"}); }
TEST(Config, BadTokenizer) { expect_bad(json::parse(R"({"data":{"tokenizer":"moses"}})"), {"data.tokenizer", "space, 13a"}); }
TEST(Config, BadDevice) { expect_bad(json::parse(R"({"device":"gpu"})"), {"device", "cuda:N"}); }
TEST(Config, LabelSmoothingOutOfRange) {
  expect_bad(json::parse(R"({"train":{"label_smoothing":1.5}})"), {"train.label_smoothing"});
}
TEST(Config, MinFreqZero) { expect_bad(json::parse(R"({"data":{"src_vocab":{"min_freq":0}}})"), {"data.src_vocab.min_freq"}); }

TEST(Config, OverrideSetsNumbersStringsAndArrays) {
  json j = json::object();
  attnmt::apply_override(j, "model.dropout=0.3");
  attnmt::apply_override(j, "data.train.src=some/file.txt");
  attnmt::apply_override(j, "data.train.tgt=other.txt");
  attnmt::apply_override(j, "eval.buckets=[5,10]");
  attnmt::apply_override(j, "model.attention.type=luong");
  Config c = attnmt::config_from_json(j);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.3);
  EXPECT_EQ(c.data.train.src, "some/file.txt");
  ASSERT_EQ(c.eval.buckets.size(), 2u);
  EXPECT_EQ(c.eval.buckets[0], 5);
  EXPECT_EQ(c.model.attention.type, "luong");
}

TEST(Config, OverrideValidatedLikeFile) {
  json j = json::object();
  attnmt::apply_override(j, "model.hidden=3");
  expect_bad(j, {"model.hidden", "unknown key"});
  json k = json::object();
  EXPECT_THROW(attnmt::apply_override(k, "novalue"), UsageError);
}

TEST(Config, LoadConfigReportsMissingFileAndBadJson) {
  EXPECT_THROW(attnmt::load_config("/nonexistent/config.json", {}), UsageError);
  std::string path = testing::TempDir() + "/bad_config.json";
  std::ofstream(path) << "{\"model\": {";
  try {
    attnmt::load_config(path, {});
    FAIL() << "malformed JSON accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
}

TEST(Config, MissingDataFileNamesPath) {
  json j = json::parse(R"({"data":{"train":{"src":"/nonexistent/a","tgt":"/nonexistent/b"},"valid":{"src":"/nonexistent/c","tgt":"/nonexistent/d"}}})");
  Config c = attnmt::config_from_json(j);
  try {
    attnmt::check_data_files(c, true);
    FAIL() << "missing file accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train.src"), std::string::npos) << e.what();
  }
}

// Found by scripts/fuzz.sh (tests/fuzz/regressions/config/number-overflow): a number beyond double's
// range made nlohmann throw out_of_range, which escaped as a runtime failure (exit 1) instead of bad input.
TEST(Config, NumberOutOfRangeIsBadInput) {
  std::string dir = attnmt::test::temp_dir("cfg_overflow");
  std::string path = attnmt::test::write_file(dir + "/c.json", R"({"train": {"lr": 1e444444}})");
  try {
    attnmt::load_config(path, {});
    FAIL() << "expected UsageError";
  } catch (const attnmt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  // Through --set the value is kept as a string, and validation names the key.
  try {
    attnmt::load_config("", {"train.lr=1e999"});
    FAIL() << "expected UsageError";
  } catch (const attnmt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("train.lr"), std::string::npos) << e.what();
  }
}
