// The config key table: every key's path, type, documentation, reader, writer and check, and the reading of a JSON
// tree through it. config.cpp builds Config from JSON and back with it.
#include "common/config_keys.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/errors.h"

namespace attnmt {

namespace config_detail {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UsageError("config: " + path + ": " + what);
}

}  // namespace config_detail

namespace {

using nlohmann::json;
using config_detail::Key;
using config_detail::fail;
using config_detail::join;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a floating-point number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

// A number as a message or the key table shows it: integers without a fraction, others as %g.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// An allowed interval; open ends exclude the bound. note explains a special value ("0 = no limit").
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
  std::string note;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string text() const {
    std::string t;
    if (hi == kInf)
      t = std::string(lo_open ? "> " : ">= ") + num(lo);
    else
      t = std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
    return note.empty() ? t : t + " (" + note + ")";
  }
};
Range at_least(double lo, std::string note = "") { return {lo, kInf, false, false, std::move(note)}; }
Range above(double lo) { return {lo, kInf, true, false, ""}; }
Range closed(double lo, double hi) { return {lo, hi, false, false, ""}; }
Range half_open(double lo, double hi) { return {lo, hi, false, true, ""}; }
Range open(double lo, double hi) { return {lo, hi, true, true, ""}; }


// Field accessors are captureless lambdas returning a reference into Config.
template <class F>
using FieldType = std::remove_reference_t<decltype(std::declval<F>()(std::declval<Config&>()))>;

template <class F>
Key base_key(const std::string& path, const std::string& type, const std::string& doc, F field) {
  Key k;
  k.path = path;
  k.type = type;
  k.doc = doc;
  k.address = [field](const Config& c) -> const void* { return &field(const_cast<Config&>(c)); };
  k.get = [field](const Config& c) { return json(field(const_cast<Config&>(c))); };
  k.check = [](const Config&) {};
  return k;
}

template <class F>
Key integer(const std::string& path, F field, Range r, const std::string& doc) {
  using T = FieldType<F>;
  Key k = base_key(path, "integer " + r.text(), doc, field);
  k.set = [field, path](Config& c, const json& v) {
    if (!v.is_number_integer()) fail(path, std::string("expected an integer, got ") + type_name(v));
    const long double x = v.is_number_unsigned() ? static_cast<long double>(v.get<uint64_t>()) : static_cast<long double>(v.get<int64_t>());
    if (x < static_cast<long double>(std::numeric_limits<T>::min()) || x > static_cast<long double>(std::numeric_limits<T>::max()))
      fail(path, "integer out of range");
    field(c) = static_cast<T>(x);
  };
  k.check = [field, path, r](const Config& c) {
    const double v = static_cast<double>(field(const_cast<Config&>(c)));
    if (!r.contains(v)) fail(path, "must be " + r.text() + ", got " + num(v));
  };
  return k;
}

template <class F>
Key number(const std::string& path, F field, Range r, const std::string& doc) {
  Key k = base_key(path, "number " + r.text(), doc, field);
  k.set = [field, path](Config& c, const json& v) {
    if (!v.is_number()) fail(path, std::string("expected a number, got ") + type_name(v));
    field(c) = v.get<double>();
  };
  k.check = [field, path, r](const Config& c) {
    const double v = field(const_cast<Config&>(c));
    if (!r.contains(v)) fail(path, "must be " + r.text() + ", got " + num(v));
  };
  return k;
}

template <class F>
Key boolean(const std::string& path, F field, const std::string& doc) {
  Key k = base_key(path, "boolean", doc, field);
  k.set = [field, path](Config& c, const json& v) {
    if (!v.is_boolean()) fail(path, std::string("expected true or false, got ") + type_name(v));
    field(c) = v.get<bool>();
  };
  return k;
}

void read_string(const std::string& path, const json& v, std::string& out) {
  if (!v.is_string()) fail(path, std::string("expected a string, got ") + type_name(v));
  out = v.get<std::string>();
}

// A free string (a path); must_be_set: the empty string is refused.
template <class F>
Key text(const std::string& path, F field, bool must_be_set, const std::string& doc) {
  Key k = base_key(path, "string", doc, field);
  k.set = [field, path](Config& c, const json& v) { read_string(path, v, field(c)); };
  if (must_be_set)
    k.check = [field, path](const Config& c) {
      if (field(const_cast<Config&>(c)).empty()) fail(path, "must not be empty");
    };
  return k;
}

// "one of `a` \| `b`" for the key table.
std::string one_of(const std::vector<std::string>& names) {
  std::string out = "one of ";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? " \\| `" : "`") + names[i] + "`";
  return out;
}

void check_choice(const std::string& path, const std::string& value, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end())
    fail(path, "unknown value '" + value + "'. Valid options: " + join(choices));
}

// A string that must be one of choices.
template <class F>
Key choice(const std::string& path, F field, std::vector<std::string> choices, const std::string& doc) {
  Key k = base_key(path, one_of(choices), doc, field);
  k.set = [field, path](Config& c, const json& v) { read_string(path, v, field(c)); };
  k.check = [field, path, choices](const Config& c) { check_choice(path, field(const_cast<Config&>(c)), choices); };
  return k;
}

// An enum read and written by name; an empty name (when allow_empty) is the enum's first value, "not given".
template <class F, class E = FieldType<F>>
Key enumeration(const std::string& path, F field, E (*parse)(const std::string&), std::vector<E> values, bool allow_empty,
                const std::string& doc) {
  std::vector<std::string> names;
  for (E e : values) names.push_back(to_string(e));
  Key k = base_key(path, one_of(names), doc, field);
  k.get = [field](const Config& c) { return json(to_string(field(const_cast<Config&>(c)))); };
  k.set = [field, path, parse, names, allow_empty](Config& c, const json& v) {
    std::string s;
    read_string(path, v, s);
    if (s.empty() && allow_empty) {
      field(c) = E{};
      return;
    }
    if (std::find(names.begin(), names.end(), s) == names.end()) check_choice(path, s, names);
    field(c) = parse(s);
  };
  k.write_default = !allow_empty;
  return k;
}

// k with its applicability (Key::applies), and the same said for people (Key::when).
Key applying(Key k, std::string when, std::function<std::string(const Config&)> applies) {
  k.applies = std::move(applies);
  k.when = std::move(when);
  return k;
}

// Whether c's attention type is the one named (by its config name: the types themselves are decided in config.cpp and
// model/attention.cpp only, Layers.AttentionTypesAreDecidedInThreeFiles).
bool attention_is(const Config& c, const std::string& name) { return to_string(c.model.attention.type) == name; }

// Applies to one attention type only (named as in the config); why: said after the type.
std::function<std::string(const Config&)> attention_type_is(std::string name, std::string why) {
  return [name, why](const Config& c) -> std::string {
    if (attention_is(c, name)) return "";
    return "only applies to type '" + name + "'" + why + ", not '" + to_string(c.model.attention.type) + "'";
  };
}

// Applies to a self-attention stack only (the encoder's or the decoder's, as side says); why: said after the refusal.
std::function<std::string(const Config&)> self_attention_stack(LayerType (*side)(const Config&), std::string why) {
  return [side, why](const Config& c) -> std::string {
    return side(c) == LayerType::kSelfAttention ? "" : "only applies to type 'self_attention'" + why;
  };
}

template <class F>
Key integer_list(const std::string& path, F field, const std::string& doc) {
  Key k = base_key(path, "list of integers", doc, field);
  k.set = [field, path](Config& c, const json& v) {
    if (!v.is_array()) fail(path, std::string("expected an array of integers, got ") + type_name(v));
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < INT32_MIN || v[i].get<int64_t>() > INT32_MAX)
        fail(path + "[" + std::to_string(i) + "]", std::string("expected an integer, got ") + type_name(v[i]));
      out.push_back(v[i].get<int>());
    }
    field(c) = out;
  };
  return k;
}

}  // namespace

namespace config_detail {

namespace {

// run_dir, device and data.*
void add_run_and_data_keys(std::vector<Key>& t) {
  t.push_back(text("run_dir", [](Config& c) -> std::string& { return c.run_dir; }, true,
                   "where checkpoints, vocabularies, logs and metrics go"));
  {
    Key k = text("device", [](Config& c) -> std::string& { return c.device; }, false,
                 "`auto` (CUDA when available) \\| `cpu` \\| `cuda` \\| `cuda:N`; `--device` overrides");
    k.check = [](const Config& c) {
      const std::string& d = c.device;
      bool ok = d == "auto" || d == "cpu" || d == "cuda";
      if (!ok && d.rfind("cuda:", 0) == 0 && d.size() > 5) ok = d.find_first_not_of("0123456789", 5) == std::string::npos;
      if (!ok) fail("device", "unknown value '" + d + "'. Valid options: auto, cpu, cuda, cuda:N");
    };
    t.push_back(k);
  }
#define ATTNMT_SPLIT_KEYS(NAME, WHAT)                                                                                   \
  t.push_back(text("data." #NAME ".src", [](Config& c) -> std::string& { return c.data.NAME.src; }, false,             \
                 WHAT ": source-side file, one sentence per line"));                                                \
  t.push_back(text("data." #NAME ".tgt", [](Config& c) -> std::string& { return c.data.NAME.tgt; }, false,             \
                 WHAT ": target-side file, line-aligned with src"));                                                \
  t.push_back(text("data." #NAME ".tsv", [](Config& c) -> std::string& { return c.data.NAME.tsv; }, false,             \
                 WHAT ": instead of src/tgt, one TSV file `src<TAB>tgt[<TAB>ignored...]`"));                        \
  t.push_back(text("data." #NAME ".align", [](Config& c) -> std::string& { return c.data.NAME.align; }, false,         \
                 WHAT ": gold alignments, Pharaoh `i-j` (0-based source-target); used for AER"));
  ATTNMT_SPLIT_KEYS(train, "training pairs")
  ATTNMT_SPLIT_KEYS(valid, "validation pairs")
  ATTNMT_SPLIT_KEYS(test, "test pairs (`evaluate`)")
#undef ATTNMT_SPLIT_KEYS
  t.push_back(integer("data.max_len", [](Config& c) -> int& { return c.data.max_len; }, closed(1, 1000),
                      "training/validation pairs with a side longer than this many tokens (pieces with `sentencepiece`) are dropped and counted"));
  t.push_back(boolean("data.lowercase", [](Config& c) -> bool& { return c.data.lowercase; }, "lowercase before tokenizing"));
  t.push_back(choice("data.tokenizer", [](Config& c) -> std::string& { return c.data.tokenizer; }, {"space", "13a", "sentencepiece"},
                     "`space`: pre-tokenized text; `13a`: sacreBLEU's 13a rules; `sentencepiece`: subword pieces (`data.spm.*`)"));
  t.push_back(integer("data.spm.vocab_size", [](Config& c) -> int& { return c.data.spm.vocab_size; }, closed(8, 1000000),
                      "pieces per SentencePiece model, trained on the training split by `train`"));
  t.push_back(choice("data.spm.model_type", [](Config& c) -> std::string& { return c.data.spm.model_type; },
                     {"unigram", "bpe"}, "SentencePiece algorithm"));
  t.push_back(boolean("data.spm.joint", [](Config& c) -> bool& { return c.data.spm.joint; },
                      "one SentencePiece model trained on both sides (else one per side)"));
  t.push_back(number("data.spm.character_coverage", [](Config& c) -> double& { return c.data.spm.character_coverage; },
                     {0, 1, true, false, ""}, "share of the training characters the pieces cover; the rest become `<unk>`"));
  auto sentencepiece_only = [](const Config& c) -> std::string {
    return c.data.tokenizer == "sentencepiece" ? "" : "only applies to tokenizer 'sentencepiece', not '" + c.data.tokenizer + "'";
  };
  t.push_back(applying(text("data.spm.src_model", [](Config& c) -> std::string& { return c.data.spm.src_model; }, false,
                            "a trained SentencePiece `.model` for the source side instead of training one (with `tgt_model`)"),
                       "`data.tokenizer` `sentencepiece`", sentencepiece_only));
  t.push_back(applying(text("data.spm.tgt_model", [](Config& c) -> std::string& { return c.data.spm.tgt_model; }, false,
                            "a trained SentencePiece `.model` for the target side (with `src_model`)"),
                       "`data.tokenizer` `sentencepiece`", sentencepiece_only));
  t.push_back(integer("data.src_vocab.min_freq", [](Config& c) -> int& { return c.data.src_vocab.min_freq; }, at_least(1),
                      "keep source tokens seen at least this often"));
  t.push_back(integer("data.src_vocab.max_size", [](Config& c) -> int& { return c.data.src_vocab.max_size; },
                      at_least(0, "0 = no limit"), "keep at most this many source tokens besides the specials"));
  t.push_back(integer("data.tgt_vocab.min_freq", [](Config& c) -> int& { return c.data.tgt_vocab.min_freq; }, at_least(1),
                      "keep target tokens seen at least this often"));
  t.push_back(integer("data.tgt_vocab.max_size", [](Config& c) -> int& { return c.data.tgt_vocab.max_size; },
                      at_least(0, "0 = no limit"), "keep at most this many target tokens besides the specials"));
}

// model.*: the cell, sizes, dropout and attention
void add_model_keys(std::vector<Key>& t) {
  t.push_back(enumeration("model.rnn", [](Config& c) -> RnnCell& { return c.model.rnn; }, rnn_cell_from_string,
                          {RnnCell::kGru, RnnCell::kLstm}, false, "recurrent cell of encoder and decoder"));
  t.push_back(integer("model.embed_dim", [](Config& c) -> int& { return c.model.embed_dim; }, closed(1, 65536),
                      "embedding size (source and target)"));
  t.push_back(integer("model.hidden_dim", [](Config& c) -> int& { return c.model.hidden_dim; }, closed(1, 65536),
                      "decoder state size; a bidirectional encoder gives each direction half of it (must be even then)"));
  t.push_back(integer("model.encoder_layers", [](Config& c) -> int& { return c.model.encoder_layers; }, closed(1, 16),
                      "stacked encoder RNN layers"));
  t.push_back(integer("model.decoder_layers", [](Config& c) -> int& { return c.model.decoder_layers; }, closed(1, 16),
                      "stacked decoder RNN layers"));
  t.push_back(boolean("model.bidirectional", [](Config& c) -> bool& { return c.model.bidirectional; }, "bidirectional encoder"));
  t.push_back(number("model.dropout", [](Config& c) -> double& { return c.model.dropout; }, half_open(0, 1),
                     "dropout on embeddings, between layers and before the output layer"));
  t.push_back(applying(boolean("model.input_feeding", [](Config& c) -> bool& { return c.model.input_feeding; },
                               "feed the attentional state into the next step"),
                       "types `luong` and `scaled_dot`, RNN decoder", [](const Config& c) -> std::string {
                         if (!attention_is(c, "luong") && !attention_is(c, "scaled_dot"))
                           return "only applies to types 'luong' and 'scaled_dot', not '" + to_string(c.model.attention.type) + "'";
                         return c.model.decoder.type == LayerType::kSelfAttention ? "only applies to an RNN decoder" : "";
                       }));
  t.push_back(applying(boolean("model.tie_output", [](Config& c) -> bool& { return c.model.tie_output; },
                               "the output layer's weights are the target embeddings (Press & Wolf 2017)"),
                       "hidden_dim equal to embed_dim", [](const Config& c) -> std::string {
                         if (c.model.hidden_dim == c.model.embed_dim) return "";
                         return "needs model.hidden_dim (" + std::to_string(c.model.hidden_dim) + ") equal to model.embed_dim (" +
                                std::to_string(c.model.embed_dim) + "): the output layer reads hidden_dim features";
                       }));
  t.push_back(enumeration("model.attention.type", [](Config& c) -> AttentionType& { return c.model.attention.type; },
                          attention_type_from_string,
                          attention_types(), false, "how the decoder gets its context; `none` is the fixed context vector"));
  t.push_back(applying(enumeration("model.attention.score", [](Config& c) -> LuongScore& { return c.model.attention.score; },
                                   luong_score_from_string, {LuongScore::kDot, LuongScore::kGeneral, LuongScore::kConcat},
                                   true, "the score function (not given: `general`)"),
                       "type `luong`", attention_type_is("luong", "")));
  t.push_back(applying(integer("model.attention.heads", [](Config& c) -> int& { return c.model.attention.heads; },
                               closed(1, 1024), "attention heads; must divide the attention dimension"),
                       "type `scaled_dot`", attention_type_is("scaled_dot", "")));
  t.push_back(applying(integer("model.attention.dim", [](Config& c) -> int& { return c.model.attention.dim; },
                               at_least(0, "0 = hidden_dim"), "attention dimension"),
                       "types `bahdanau`, `scaled_dot`, and `luong` with score `concat`", [](const Config& c) -> std::string {
                         const auto& a = c.model.attention;
                         const bool luong = attention_is(c, "luong");
                         if (!attention_is(c, "none") && !(luong && effective_score(a) != LuongScore::kConcat)) return "";
                         return "has no effect for type '" + to_string(a.type) + "'" +
                                (luong ? " with score '" + to_string(effective_score(a)) + "'" : std::string());
                       }));
  t.push_back(applying(boolean("model.attention.scale", [](Config& c) -> bool& { return c.model.attention.scale; },
                               "divide the scores by √d_k (experiment key: `false` shows why it is there)"),
                       "type `scaled_dot`", attention_type_is("scaled_dot", " (the only one that scales its scores)")));
  t.push_back(applying(boolean("model.attention.mask", [](Config& c) -> bool& { return c.model.attention.mask; },
                               "padded source positions get attention weight 0 (experiment key: `false` lets padding into "
                               "the softmax)"),
                       "types other than `none`", [](const Config& c) -> std::string {
                         return attention_is(c, "none") ? "has no effect for type 'none' (no attention to mask)"
                                                                               : "";
                       }));
}

// model.encoder.* and model.decoder.*: the layers of each side. Written to config.json only when not at their
// defaults, so that the config of an RNN run reads as it always has.
void add_stack_keys(std::vector<Key>& t) {
  auto quiet = [](Key k) {
    k.write_default = false;
    return k;
  };
#define ATTNMT_STACK_KEYS(SIDE, WHAT)                                                                                   \
  t.push_back(quiet(enumeration("model." #SIDE ".type", [](Config& c) -> LayerType& { return c.model.SIDE.type; },      \
                              layer_type_from_string, {LayerType::kRnn, LayerType::kSelfAttention}, false,            \
                              WHAT ": recurrent layers or self-attention layers (`" #SIDE "_layers` of them, "       \
                              "`hidden_dim` wide)")));                                                              \
  t.push_back(applying(quiet(enumeration("model." #SIDE ".positions", [](Config& c) -> Positions& { return c.model.SIDE.positions; }, \
                              positions_from_string, {Positions::kSinusoidal, Positions::kLearned, Positions::kNone},   \
                              false, "how the " WHAT " sees word order (`none`: it does not)")), \
                     "`model." #SIDE ".type` `self_attention`", self_attention_stack([](const Config& c) { return c.model.SIDE.type; }, ""))); \
  t.push_back(applying(quiet(integer("model." #SIDE ".heads", [](Config& c) -> int& { return c.model.SIDE.heads; }, closed(1, 1024), \
                          "self-attention heads of the " WHAT "; must divide `hidden_dim`")),  \
                     "`model." #SIDE ".type` `self_attention`", self_attention_stack([](const Config& c) { return c.model.SIDE.type; }, ""))); \
  t.push_back(applying(quiet(integer("model." #SIDE ".ff_dim", [](Config& c) -> int& { return c.model.SIDE.ff_dim; },              \
                          at_least(0, "0 = 4 x hidden_dim"), "feed-forward size of each " WHAT " layer")), \
                     "`model." #SIDE ".type` `self_attention`", self_attention_stack([](const Config& c) { return c.model.SIDE.type; }, "")));
  ATTNMT_STACK_KEYS(encoder, "encoder")
  ATTNMT_STACK_KEYS(decoder, "decoder")
#undef ATTNMT_STACK_KEYS
  t.push_back(applying(quiet(boolean("model.decoder.causal_mask", [](Config& c) -> bool& { return c.model.decoder.causal_mask; },
                                     "position t attends to positions <= t (experiment key: "
                                     "`false` lets training peek at the next words)")),
                       "`model.decoder.type` `self_attention`", self_attention_stack([](const Config& c) { return c.model.decoder.type; },
                                            " (an RNN decoder cannot see ahead)")));
}

// train.*
void add_train_keys(std::vector<Key>& t) {
  t.push_back(integer("train.epochs", [](Config& c) -> int& { return c.train.epochs; }, closed(1, 100000),
                      "passes over the training data"));
  t.push_back(integer("train.max_steps", [](Config& c) -> long& { return c.train.max_steps; }, at_least(0, "0 = no limit"),
                      "stop after this many updates"));
  t.push_back(number("train.max_minutes", [](Config& c) -> double& { return c.train.max_minutes; }, at_least(0, "0 = no limit"),
                     "stop after this much training time"));
  t.push_back(integer("train.batch_size", [](Config& c) -> int& { return c.train.batch_size; }, closed(1, 100000),
                      "sentence pairs per batch (length-bucketed)"));
  t.push_back(integer("train.batch_tokens", [](Config& c) -> int& { return c.train.batch_tokens; },
                      at_least(0, "0 = batches of `batch_size` sentences"),
                      "instead of `batch_size`: as many sentences as fit in this many target tokens, padding and `<eos>` included "
                      "(a longer sentence goes alone)"));
  t.push_back(number("train.lr", [](Config& c) -> double& { return c.train.lr; }, {0, 10, true, false, ""},
                     "Adam learning rate"));
  t.push_back(number("train.clip_norm", [](Config& c) -> double& { return c.train.clip_norm; }, at_least(0, "0 = off"),
                     "gradient clipping by global norm"));
  t.push_back(number("train.teacher_forcing", [](Config& c) -> double& { return c.train.teacher_forcing; }, closed(0, 1),
                     "probability of feeding the gold previous token (else the model's own prediction)"));
  t.push_back(number("train.label_smoothing", [](Config& c) -> double& { return c.train.label_smoothing; }, half_open(0, 1),
                     "label smoothing of the cross-entropy loss"));
  t.push_back(integer("train.seed", [](Config& c) -> int& { return c.train.seed; }, at_least(0),
                      "seed for initialisation, shuffling and dropout"));
  t.push_back(integer("train.valid_every", [](Config& c) -> long& { return c.train.valid_every; },
                      at_least(0, "0 = epoch end only"), "validate every this many steps, and at each epoch end"));
  t.push_back(integer("train.log_every", [](Config& c) -> long& { return c.train.log_every; }, at_least(1),
                      "plain progress line every this many steps when stderr is not a terminal"));
  t.push_back(integer("train.keep_checkpoints", [](Config& c) -> int& { return c.train.keep_checkpoints; },
                      closed(0, 1000), "keep the checkpoints of the last N validations as `ckpt-<step>.pt` (0 = none), for `attnmt average`"));
  t.push_back(integer("train.snapshot_sentences", [](Config& c) -> int& { return c.train.snapshot_sentences; },
                      closed(0, 20), "validation sentences whose attention maps are kept at every validation in `progress/` (0 = none)"));
  t.push_back(choice("train.precision", [](Config& c) -> std::string& { return c.train.precision; }, {"fp32", "tf32", "bf16"},
                     "`tf32`: float32 products and cuDNN in TF32 on CUDA; `bf16`: forward passes autocast to bfloat16, "
                     "parameters, optimizer state and loss in float32 (docs/gpu.md)"));
  t.push_back(choice("train.early_stopping.metric", [](Config& c) -> std::string& { return c.train.early_stopping.metric; },
                     {"bleu", "ppl"}, "the validation metric that picks `best.pt` (greedy BLEU, or perplexity)"));
  t.push_back(integer("train.early_stopping.patience", [](Config& c) -> int& { return c.train.early_stopping.patience; },
                      at_least(0, "0 = never stop early"), "stop after this many validations without improvement"));
  t.push_back(choice("train.lr_schedule.type", [](Config& c) -> std::string& { return c.train.lr_schedule.type; },
                     {"none", "plateau", "step"},
                     "`plateau`: reduce the learning rate when the early-stopping metric stalls; `step`: after update `start`, "
                     "then every `every` updates"));
  t.push_back(number("train.lr_schedule.factor", [](Config& c) -> double& { return c.train.lr_schedule.factor; }, open(0, 1),
                     "plateau, step: multiply the learning rate by this"));
  t.push_back(integer("train.lr_schedule.patience", [](Config& c) -> int& { return c.train.lr_schedule.patience; }, at_least(0),
                      "plateau: validations without improvement before reducing"));
  t.push_back(integer("train.lr_schedule.warmup", [](Config& c) -> int& { return c.train.lr_schedule.warmup; },
                      at_least(0), "any type: over the first this many updates the rate rises linearly, from "
                                   "`train.lr`/warmup to `train.lr` (0 = none)"));
  t.push_back(number("train.lr_schedule.min_lr", [](Config& c) -> double& { return c.train.lr_schedule.min_lr; }, at_least(0),
                     "plateau, step: never go below this"));
  auto step_only = [](const Config& c) -> std::string {
    return c.train.lr_schedule.type == "step" ? "" : "only applies to type 'step', not '" + c.train.lr_schedule.type + "'";
  };
  t.push_back(applying(integer("train.lr_schedule.start", [](Config& c) -> int& { return c.train.lr_schedule.start; },
                               at_least(0), "step: reduce the rate after this update (0: first after `every` updates)"),
                       "type `step`", step_only));
  t.push_back(applying(integer("train.lr_schedule.every", [](Config& c) -> int& { return c.train.lr_schedule.every; },
                               at_least(1), "step: then reduce it again after every this many updates"),
                       "type `step`", step_only));
}

// eval.*
void add_eval_keys(std::vector<Key>& t) {
  t.push_back(integer("eval.beam_size", [](Config& c) -> int& { return c.eval.beam_size; }, closed(1, 100),
                      "beam width (1 = greedy)"));
  t.push_back(number("eval.length_penalty", [](Config& c) -> double& { return c.eval.length_penalty; }, closed(0, 5),
                     "GNMT length penalty α, ((5+len)/6)^α; 0 = raw log-probability"));
  t.push_back(number("eval.max_len_ratio", [](Config& c) -> double& { return c.eval.max_len_ratio; }, above(0),
                     "decode at most `max_len_ratio × src_len + 10` tokens"));
  t.push_back(integer("eval.batch_size", [](Config& c) -> int& { return c.eval.batch_size; }, closed(1, 100000),
                      "sentences decoded at once"));
  {
    Key k = integer_list("eval.buckets", [](Config& c) -> std::vector<int>& { return c.eval.buckets; },
                         "upper edges of the source-length buckets of BLEU by length (a last bucket takes the rest)");
    k.check = [](const Config& c) {
      const auto& b = c.eval.buckets;
      if (b.empty()) fail("eval.buckets", "must list at least one bucket edge");
      for (size_t i = 0; i < b.size(); ++i) {
        if (b[i] < 1) fail("eval.buckets[" + std::to_string(i) + "]", "must be >= 1");
        if (i > 0 && b[i] <= b[i - 1]) fail("eval.buckets[" + std::to_string(i) + "]", "edges must be strictly increasing");
      }
    };
    t.push_back(k);
  }
}

}  // namespace

// Every config key, in the order of configs/README.md. The one place a key's name is spelled.
const std::vector<Key>& keys() {
  static const std::vector<Key> table = [] {
    std::vector<Key> t;
    add_run_and_data_keys(t);
    add_model_keys(t);
    add_stack_keys(t);
    add_train_keys(t);
    add_eval_keys(t);
    return t;
  }();
  return table;
}

// Keys that older versions read and this one ignores (with a warning), so that older run directories load.
const std::vector<std::pair<std::string, std::string>>& retired_keys() {
  static const std::vector<std::pair<std::string, std::string>> r = {
      {"train.valid_beam", "validation BLEU is always greedy"}};
  return r;
}

std::string parent_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

bool is_section(const std::string& path) {
  for (const auto& k : keys())
    if (k.path.rfind(path + ".", 0) == 0) return true;
  return false;
}

// The names valid directly under section `prefix` ("" = the top level), in table order.
std::vector<std::string> children(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& k : keys()) {
    std::string rest = prefix.empty() ? k.path : (k.path.rfind(prefix + ".", 0) == 0 ? k.path.substr(prefix.size() + 1) : "");
    if (rest.empty()) continue;
    std::string name = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

const Key* find_key(const std::string& path) {
  for (const auto& k : keys())
    if (k.path == path) return &k;
  return nullptr;
}

void read_section(Config& c, const json& j, const std::string& prefix) {
  if (!j.is_object()) fail(prefix.empty() ? "<root>" : prefix, std::string("expected an object, got ") + type_name(j));
  for (const auto& [name, value] : j.items()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (const Key* k = find_key(path)) {
      k->set(c, value);
    } else if (is_section(path)) {
      read_section(c, value, path);
    } else {
      auto retired = std::find_if(retired_keys().begin(), retired_keys().end(), [&](const auto& r) { return r.first == path; });
      if (retired != retired_keys().end())
        spdlog::warn("config: {}: no longer used ({}); ignored", path, retired->second);
      else
        fail(path, "unknown key (valid keys here: " + join(children(prefix)) + ")");
    }
  }
}

void set_path(json& root, const std::string& path, json value) {
  json* node = &root;
  std::stringstream ss(path);
  std::vector<std::string> parts;
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  for (size_t i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i]];
  (*node)[parts.back()] = std::move(value);
}

}  // namespace config_detail

}  // namespace attnmt
