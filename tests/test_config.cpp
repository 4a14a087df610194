#include <gtest/gtest.h>

#include <fstream>
#include <algorithm>
#include <sstream>

#include "common/config.h"
#include "common/config_keys.h"
#include "common/errors.h"
#include "common/progress.h"
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
  EXPECT_EQ(c.model.attention.type, attnmt::AttentionType::kBahdanau);
  EXPECT_EQ(c.data.tokenizer, "13a");
  EXPECT_EQ(c.eval.buckets.size(), 6u);
}

TEST(Config, ReadsNestedValues) {
  json j = json::parse(R"({"run_dir":"r","model":{"rnn":"lstm","hidden_dim":32,"attention":{"type":"luong","score":"dot"}},
    "train":{"lr":0.01,"early_stopping":{"metric":"ppl","patience":3}},"eval":{"buckets":[5,15]}})");
  Config c = attnmt::config_from_json(j);
  EXPECT_EQ(c.run_dir, "r");
  EXPECT_EQ(c.model.rnn, attnmt::RnnCell::kLstm);
  EXPECT_EQ(c.model.hidden_dim, 32);
  EXPECT_EQ(c.model.attention.score, attnmt::LuongScore::kDot);
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
TEST(Config, NegativeLr) { expect_bad(json::parse(R"({"train":{"lr":-1}})"), {"train.lr", "in (0, 10]"}); }
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
// Each key set where it means nothing is refused naming the key and where it applies (the key table's Key::applies),
// and accepted where it applies.
TEST(Config, TiedOutputNeedsTheEmbeddingSize) {
  expect_bad(json::parse(R"({"model":{"tie_output":true,"embed_dim":64,"hidden_dim":128}})"),
             {"model.tie_output", "needs model.hidden_dim (128) equal to model.embed_dim (64)"});
  const Config c = config_from_json(json::parse(R"({"model":{"tie_output":true,"embed_dim":96,"hidden_dim":96}})"));
  EXPECT_TRUE(c.model.tie_output);
}
TEST(Config, EachKeyOnlyWhereItApplies) {
  expect_bad(json::parse(R"({"model":{"attention":{"type":"luong","score":"dot","dim":64}}})"),
             {"model.attention.dim", "has no effect for type 'luong' with score 'dot'"});
  expect_bad(json::parse(R"({"model":{"attention":{"type":"none","dim":64}}})"), {"model.attention.dim", "type 'none'"});
  EXPECT_NO_THROW(attnmt::config_from_json(json::parse(R"({"model":{"attention":{"type":"luong","score":"concat","dim":64}}})")));
  expect_bad(json::parse(R"({"model":{"attention":{"type":"bahdanau","scale":false}}})"),
             {"model.attention.scale", "only applies to type 'scaled_dot' (the only one that scales its scores), not 'bahdanau'"});
  EXPECT_NO_THROW(attnmt::config_from_json(json::parse(R"({"model":{"attention":{"type":"scaled_dot","scale":false}}})")));
  expect_bad(json::parse(R"({"model":{"attention":{"type":"none","mask":false}}})"), {"model.attention.mask", "no attention to mask"});
  expect_bad(json::parse(R"({"model":{"input_feeding":true,"attention":{"type":"bahdanau"}}})"),
             {"model.input_feeding", "only applies to types 'luong' and 'scaled_dot', not 'bahdanau'"});
  expect_bad(json::parse(R"({"data":{"tokenizer":"13a","spm":{"src_model":"a.model","tgt_model":"b.model"}}})"),
             {"data.spm.src_model", "only applies to tokenizer 'sentencepiece', not '13a'"});
  expect_bad(json::parse(R"({"train":{"lr_schedule":{"type":"plateau","start":100}}})"),
             {"train.lr_schedule.start", "only applies to type 'step', not 'plateau'"});
  EXPECT_NO_THROW(attnmt::config_from_json(json::parse(R"({"train":{"lr_schedule":{"type":"step","start":100,"every":50}}})")));
  expect_bad(json::parse(R"({"train":{"lr_schedule":{"type":"step","every":0}}})"), {"train.lr_schedule.every"});
  // A pair given by halves is said first, whatever the tokenizer.
  expect_bad(json::parse(R"({"data":{"spm":{"tgt_model":"b.model"}}})"), {"data.spm.src_model", "given together"});
}

// Where a key applies is said twice in its one entry, for validate (Key::applies) and for people (Key::when, the
// "applies to" column of configs/README.md): a key has both or neither.
TEST(Config, EachConditionalKeySaysWhereItAppliesForPeopleToo) {
  size_t conditional = 0;
  for (const auto& k : attnmt::config_detail::keys()) {
    EXPECT_EQ(static_cast<bool>(k.applies), !k.when.empty()) << k.path;
    conditional += k.applies ? 1 : 0;
  }
  EXPECT_GE(conditional, 13u);  // data.spm.{src,tgt}_model, input_feeding, attention.{score,heads,dim,scale,mask}, ...
  const std::string md = attnmt::config_keys_markdown();
  EXPECT_NE(md.find("| `model.attention.score` | one of `dot` \\| `general` \\| `concat` | not given | type `luong` |"),
            std::string::npos)
      << md;
}

TEST(Config, OddHiddenBidirectional) {
  expect_bad(json::parse(R"({"model":{"hidden_dim":33,"bidirectional":true}})"), {"model.hidden_dim", "even"});
}
// The self-attention keys: each bad value, and each key where it does nothing, names the key.
TEST(Config, SelfAttentionKeys) {
  const char* sa = R"("encoder":{"type":"self_attention"},"decoder":{"type":"self_attention"},"attention":{"type":"scaled_dot"})";
  EXPECT_NO_THROW(attnmt::config_from_json(json::parse(std::string(R"({"model":{)") + sa + "}}")));
  expect_bad(json::parse(R"({"model":{"encoder":{"type":"transformer"}}})"), {"model.encoder.type", "rnn, self_attention"});
  expect_bad(json::parse(R"({"model":{"decoder":{"type":3}}})"), {"model.decoder.type", "expected a string"});
  expect_bad(json::parse(R"({"model":{"encoder":{"type":"self_attention","positions":"rotary"}}})"),
             {"model.encoder.positions", "sinusoidal, learned, none"});
  expect_bad(json::parse(R"({"model":{"encoder":{"type":"self_attention","heads":0}}})"), {"model.encoder.heads", "[1, 1024]"});
  expect_bad(json::parse(R"({"model":{"encoder":{"type":"self_attention","heads":5}}})"),
             {"model.encoder.heads", "do not divide hidden_dim 128"});
  expect_bad(json::parse(R"({"model":{"encoder":{"type":"self_attention","ff_dim":-1}}})"), {"model.encoder.ff_dim"});
  expect_bad(json::parse(R"({"model":{"encoder":{"heads":2}}})"), {"model.encoder.heads", "only applies to type 'self_attention'"});
  expect_bad(json::parse(R"({"model":{"decoder":{"positions":"none"}}})"), {"model.decoder.positions", "only applies"});
  expect_bad(json::parse(R"({"model":{"decoder":{"ff_dim":64}}})"), {"model.decoder.ff_dim", "only applies"});
  expect_bad(json::parse(R"({"model":{"decoder":{"causal_mask":false}}})"), {"model.decoder.causal_mask", "RNN decoder"});
  expect_bad(json::parse(R"({"model":{"decoder":{"causal_mask":"no"}}})"), {"model.decoder.causal_mask", "true or false"});
  expect_bad(json::parse(R"({"model":{"encoder":{"causal_mask":false}}})"), {"model.encoder.causal_mask", "unknown key"});
  expect_bad(json::parse(R"({"model":{"decoder":{"type":"self_attention"},"attention":{"type":"bahdanau"}}})"),
             {"model.attention.type", "scaled_dot", "bahdanau"});
  expect_bad(json::parse(R"({"model":{"decoder":{"type":"self_attention"},"input_feeding":true,"attention":{"type":"scaled_dot"}}})"),
             {"model.input_feeding", "RNN decoder"});
  // A self-attention encoder has no directions to halve hidden_dim between.
  EXPECT_NO_THROW(attnmt::config_from_json(json::parse(R"({"model":{"hidden_dim":30,"encoder":{"type":"self_attention","heads":3}}})")));
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
  EXPECT_EQ(c.model.attention.type, attnmt::AttentionType::kLuong);
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

// The key list of configs/README.md is the key table's own output (regenerate it with `attnmt config --keys`).
TEST(ConfigKeys, ReadmeTableIsTheKeyTable) {
  std::ifstream in(attnmt::test::source_dir() + "/configs/README.md");
  ASSERT_TRUE(in) << "configs/README.md not found";
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str(), begin = "<!-- keys:begin -->\n", end = "<!-- keys:end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "configs/README.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "configs/README.md lacks " << end;
  ASSERT_LT(b, e);
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  const auto documented = lines(doc.substr(b + begin.size(), e - b - begin.size())), table = lines(attnmt::config_keys_markdown());
  const char* fix = "configs/README.md differs from the key table; paste the output of `attnmt config --keys` between the markers";
  ASSERT_EQ(documented.size(), table.size()) << fix;
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(documented[i], table[i]) << fix;
}

namespace {
void leaf_paths(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string p = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object())
      leaf_paths(v, p, out);
    else
      out.push_back(p);
  }
}
}  // namespace

// Reading, writing and the documented list cover the same keys: every key the table documents is written
// to config.json (here with a luong score set and, in a second config, the self-attention stacks' keys: the keys
// left out at their defaults) and read back.
TEST(ConfigKeys, WrittenReadAndDocumentedKeysAreTheSame) {
  Config c;
  c.model.attention.type = attnmt::AttentionType::kLuong;
  c.model.attention.score = attnmt::LuongScore::kConcat;
  c.model.attention.dim = 8;
  attnmt::validate(c);
  Config sa;
  sa.model.attention.type = attnmt::AttentionType::kScaledDot;
  for (attnmt::StackConfig* st : {&sa.model.encoder, &sa.model.decoder}) {
    st->type = attnmt::LayerType::kSelfAttention;
    st->positions = attnmt::Positions::kLearned;
    st->heads = 2;
    st->ff_dim = 64;
  }
  sa.model.decoder.causal_mask = false;
  attnmt::validate(sa);
  std::vector<std::string> written;
  leaf_paths(attnmt::config_to_json(c), "", written);
  leaf_paths(attnmt::config_to_json(sa), "", written);
  std::sort(written.begin(), written.end());
  written.erase(std::unique(written.begin(), written.end()), written.end());
  const Config sa_back = attnmt::config_from_json(attnmt::config_to_json(sa));
  EXPECT_EQ(sa_back.model.decoder.positions, attnmt::Positions::kLearned);
  EXPECT_FALSE(sa_back.model.decoder.causal_mask);
  EXPECT_EQ(sa_back.model.encoder.ff_dim, 64);
  std::vector<std::string> documented;
  std::stringstream md(attnmt::config_keys_markdown());
  for (std::string line; std::getline(md, line);)
    if (line.rfind("| `", 0) == 0) documented.push_back(line.substr(3, line.find('`', 3) - 3));
  std::sort(written.begin(), written.end());
  std::sort(documented.begin(), documented.end());
  ASSERT_EQ(written.size(), documented.size());
  EXPECT_EQ(written, documented);
  ASSERT_GT(written.size(), 40u);
  Config back = attnmt::config_from_json(attnmt::config_to_json(c));
  EXPECT_EQ(back.model.attention.score, attnmt::LuongScore::kConcat);
  EXPECT_EQ(back.model.attention.dim, 8);
  // The default score is not written, and reads back as the default.
  Config d;
  json dj = attnmt::config_to_json(d);
  EXPECT_FALSE(dj["model"]["attention"].contains("score"));
  EXPECT_EQ(attnmt::config_from_json(dj).model.attention.score, attnmt::LuongScore::kDefault);
}

TEST(ConfigKeys, FieldsAreNamedByTheTable) {
  Config c;
  EXPECT_EQ(attnmt::config_key(c, &c.train.lr), "train.lr");
  EXPECT_EQ(attnmt::config_key(c, &c.model.attention.heads), "model.attention.heads");
  EXPECT_EQ(attnmt::config_key(c, &c.data.valid.tsv), "data.valid.tsv");
  EXPECT_EQ(attnmt::config_split_path(c, c.data.test), "data.test");
  const int not_a_key = 0;
  EXPECT_THROW(attnmt::config_key(c, &not_a_key), std::logic_error);
}

// Older run directories hold train.valid_beam in config.json; they must still load.
TEST(ConfigKeys, RetiredKeyIsIgnored) {
  Config c = attnmt::config_from_json(json::parse(R"({"train":{"valid_beam":5,"lr":0.01}})"));
  EXPECT_DOUBLE_EQ(c.train.lr, 0.01);
  EXPECT_FALSE(attnmt::config_to_json(c)["train"].contains("valid_beam"));
}

TEST(ConfigKeys, EnumNamesRoundTrip) {
  for (auto t : {attnmt::AttentionType::kNone, attnmt::AttentionType::kBahdanau, attnmt::AttentionType::kLuong,
                 attnmt::AttentionType::kScaledDot})
    EXPECT_EQ(attnmt::attention_type_from_string(attnmt::to_string(t)), t);
  for (auto s : {attnmt::LuongScore::kDot, attnmt::LuongScore::kGeneral, attnmt::LuongScore::kConcat})
    EXPECT_EQ(attnmt::luong_score_from_string(attnmt::to_string(s)), s);
  for (auto r : {attnmt::RnnCell::kGru, attnmt::RnnCell::kLstm}) EXPECT_EQ(attnmt::rnn_cell_from_string(attnmt::to_string(r)), r);
  EXPECT_THROW(attnmt::attention_type_from_string("additive"), UsageError);
  // A score given for another type is refused, naming the key.
  expect_bad(json::parse(R"({"model":{"attention":{"type":"bahdanau","score":"dot"}}})"), {"model.attention.score", "luong"});
}
