#include "common/config.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/errors.h"

namespace attnmt {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UsageError("config: " + path + ": " + what);
}

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

// Reads the members of one JSON object, remembering which keys were consumed so that the
// remaining (unknown) ones can be reported with the list of valid keys.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "<root>" : path_, std::string("expected an object, got ") + type_name(j_));
  }

  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  void get(const std::string& key, int& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(sub(key), std::string("expected an integer, got ") + type_name(v));
    long long x = v.get<long long>();
    if (x < INT32_MIN || x > INT32_MAX) fail(sub(key), "integer out of range");
    out = static_cast<int>(x);
  }
  void get(const std::string& key, long& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(sub(key), std::string("expected an integer, got ") + type_name(v));
    out = v.get<long>();
  }
  void get(const std::string& key, double& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(sub(key), std::string("expected a number, got ") + type_name(v));
    out = v.get<double>();
  }
  void get(const std::string& key, bool& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(sub(key), std::string("expected true or false, got ") + type_name(v));
    out = v.get<bool>();
  }
  void get(const std::string& key, std::string& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(sub(key), std::string("expected a string, got ") + type_name(v));
    out = v.get<std::string>();
  }
  void get(const std::string& key, std::vector<int>& out) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (!v.is_array()) fail(sub(key), std::string("expected an array of integers, got ") + type_name(v));
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        fail(sub(key) + "[" + std::to_string(i) + "]", std::string("expected an integer, got ") + type_name(v[i]));
      out.push_back(v[i].get<int>());
    }
  }
  void object(const std::string& key, const std::function<void(ObjectReader&)>& fn) {
    known_.push_back(key);
    if (!j_.contains(key)) return;
    ObjectReader r(j_.at(key), sub(key));
    fn(r);
    r.finish();
  }
  void finish() const {
    for (const auto& [k, v] : j_.items()) {
      if (std::find(known_.begin(), known_.end(), k) == known_.end())
        fail(sub(k), "unknown key (valid keys here: " + join(known_) + ")");
    }
  }

 private:
  const json& j_;
  std::string path_;
  std::vector<std::string> known_;
};

void read_split(ObjectReader& r, SplitConfig& s) {
  r.get("src", s.src);
  r.get("tgt", s.tgt);
  r.get("tsv", s.tsv);
  r.get("align", s.align);
}

void read_vocab(ObjectReader& r, VocabConfig& v) {
  r.get("min_freq", v.min_freq);
  r.get("max_size", v.max_size);
}

void check_choice(const std::string& path, const std::string& value, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end())
    fail(path, "unknown value '" + value + "'. Valid options: " + join(choices));
}

json split_json(const SplitConfig& s) {
  json j = json::object();
  j["src"] = s.src;
  j["tgt"] = s.tgt;
  j["tsv"] = s.tsv;
  j["align"] = s.align;
  return j;
}

void check_split_files(const std::string& path, const SplitConfig& s) {
  auto check = [&](const std::string& key, const std::string& file) {
    if (file.empty()) return;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) fail(path + "." + key, "file not found: " + file);
  };
  check("src", s.src);
  check("tgt", s.tgt);
  check("tsv", s.tsv);
  check("align", s.align);
}

}  // namespace

std::string effective_score(const AttentionConfig& a) {
  if (a.type != "luong") return "";
  return a.score.empty() ? "general" : a.score;
}

int effective_attention_dim(const ModelConfig& m) { return m.attention.dim > 0 ? m.attention.dim : m.hidden_dim; }

Config config_from_json(const json& j) {
  Config c;
  ObjectReader root(j, "");
  root.get("run_dir", c.run_dir);
  root.get("device", c.device);
  root.object("data", [&](ObjectReader& r) {
    r.object("train", [&](ObjectReader& s) { read_split(s, c.data.train); });
    r.object("valid", [&](ObjectReader& s) { read_split(s, c.data.valid); });
    r.object("test", [&](ObjectReader& s) { read_split(s, c.data.test); });
    r.get("max_len", c.data.max_len);
    r.get("lowercase", c.data.lowercase);
    r.get("tokenizer", c.data.tokenizer);
    r.object("src_vocab", [&](ObjectReader& v) { read_vocab(v, c.data.src_vocab); });
    r.object("tgt_vocab", [&](ObjectReader& v) { read_vocab(v, c.data.tgt_vocab); });
  });
  root.object("model", [&](ObjectReader& r) {
    r.get("rnn", c.model.rnn);
    r.get("embed_dim", c.model.embed_dim);
    r.get("hidden_dim", c.model.hidden_dim);
    r.get("encoder_layers", c.model.encoder_layers);
    r.get("decoder_layers", c.model.decoder_layers);
    r.get("bidirectional", c.model.bidirectional);
    r.get("dropout", c.model.dropout);
    r.get("input_feeding", c.model.input_feeding);
    r.object("attention", [&](ObjectReader& a) {
      a.get("type", c.model.attention.type);
      a.get("score", c.model.attention.score);
      a.get("heads", c.model.attention.heads);
      a.get("dim", c.model.attention.dim);
    });
  });
  root.object("train", [&](ObjectReader& r) {
    r.get("epochs", c.train.epochs);
    r.get("max_steps", c.train.max_steps);
    r.get("max_minutes", c.train.max_minutes);
    r.get("batch_size", c.train.batch_size);
    r.get("lr", c.train.lr);
    r.get("clip_norm", c.train.clip_norm);
    r.get("teacher_forcing", c.train.teacher_forcing);
    r.get("label_smoothing", c.train.label_smoothing);
    r.get("seed", c.train.seed);
    r.get("valid_every", c.train.valid_every);
    r.get("log_every", c.train.log_every);
    r.get("valid_beam", c.train.valid_beam);
    r.object("early_stopping", [&](ObjectReader& e) {
      e.get("metric", c.train.early_stopping.metric);
      e.get("patience", c.train.early_stopping.patience);
    });
    r.object("lr_schedule", [&](ObjectReader& s) {
      s.get("type", c.train.lr_schedule.type);
      s.get("factor", c.train.lr_schedule.factor);
      s.get("patience", c.train.lr_schedule.patience);
      s.get("min_lr", c.train.lr_schedule.min_lr);
    });
  });
  root.object("eval", [&](ObjectReader& r) {
    r.get("beam_size", c.eval.beam_size);
    r.get("length_penalty", c.eval.length_penalty);
    r.get("max_len_ratio", c.eval.max_len_ratio);
    r.get("batch_size", c.eval.batch_size);
    r.get("buckets", c.eval.buckets);
  });
  root.finish();
  validate(c);
  return c;
}

void validate(const Config& c) {
  auto positive = [](const std::string& path, double v) {
    if (!(v > 0)) fail(path, "must be > 0, got " + std::to_string(v));
  };
  auto non_negative = [](const std::string& path, double v) {
    if (!(v >= 0)) fail(path, "must be >= 0, got " + std::to_string(v));
  };
  auto in_range = [](const std::string& path, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi))
      fail(path, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  };
  if (c.run_dir.empty()) fail("run_dir", "must not be empty");
  {
    const std::string& d = c.device;
    bool ok = d == "auto" || d == "cpu" || d == "cuda";
    if (!ok && d.rfind("cuda:", 0) == 0 && d.size() > 5)
      ok = d.find_first_not_of("0123456789", 5) == std::string::npos;
    if (!ok) fail("device", "unknown value '" + d + "'. Valid options: auto, cpu, cuda, cuda:N");
  }

  // data
  auto split = [&](const std::string& name, const SplitConfig& s) {
    const std::string p = "data." + name;
    if (!s.tsv.empty() && (!s.src.empty() || !s.tgt.empty()))
      fail(p + ".tsv", "give either tsv or src/tgt, not both");
    if (s.src.empty() != s.tgt.empty()) fail(p + (s.src.empty() ? ".src" : ".tgt"), "src and tgt must be given together");
  };
  split("train", c.data.train);
  split("valid", c.data.valid);
  split("test", c.data.test);
  if (c.data.max_len < 1 || c.data.max_len > 1000) in_range("data.max_len", c.data.max_len, 1, 1000);
  check_choice("data.tokenizer", c.data.tokenizer, {"space", "13a"});
  for (const auto& [name, v] : {std::pair{"src_vocab", c.data.src_vocab}, std::pair{"tgt_vocab", c.data.tgt_vocab}}) {
    if (v.min_freq < 1) fail(std::string("data.") + name + ".min_freq", "must be >= 1, got " + std::to_string(v.min_freq));
    if (v.max_size < 0) fail(std::string("data.") + name + ".max_size", "must be >= 0 (0 = no limit), got " + std::to_string(v.max_size));
  }

  // model
  const auto& m = c.model;
  check_choice("model.rnn", m.rnn, {"gru", "lstm"});
  in_range("model.embed_dim", m.embed_dim, 1, 65536);
  in_range("model.hidden_dim", m.hidden_dim, 1, 65536);
  in_range("model.encoder_layers", m.encoder_layers, 1, 16);
  in_range("model.decoder_layers", m.decoder_layers, 1, 16);
  if (!(m.dropout >= 0 && m.dropout < 1)) fail("model.dropout", "must be in [0, 1), got " + std::to_string(m.dropout));
  if (m.bidirectional && m.hidden_dim % 2 != 0)
    fail("model.hidden_dim", "must be even with a bidirectional encoder (each direction gets hidden_dim/2), got " +
                                 std::to_string(m.hidden_dim));
  const auto& a = m.attention;
  check_choice("model.attention.type", a.type, {"none", "bahdanau", "luong", "scaled_dot"});
  if (!a.score.empty()) {
    if (a.type != "luong") fail("model.attention.score", "only applies to type 'luong', not '" + a.type + "'");
    check_choice("model.attention.score", a.score, {"dot", "general", "concat"});
  }
  if (a.heads < 1) fail("model.attention.heads", "must be >= 1, got " + std::to_string(a.heads));
  if (a.heads != 1 && a.type != "scaled_dot")
    fail("model.attention.heads", "only applies to type 'scaled_dot', not '" + a.type + "'");
  if (a.dim < 0) fail("model.attention.dim", "must be >= 0 (0 = hidden_dim), got " + std::to_string(a.dim));
  if (a.dim > 0 && (a.type == "none" || (a.type == "luong" && effective_score(a) != "concat")))
    fail("model.attention.dim", "has no effect for type '" + a.type + "'" +
                                    (a.type == "luong" ? " with score '" + effective_score(a) + "'" : std::string()));
  if (a.type == "scaled_dot" && effective_attention_dim(m) % a.heads != 0)
    fail("model.attention.heads", std::to_string(a.heads) + " heads do not divide the attention dimension " +
                                      std::to_string(effective_attention_dim(m)));
  if (m.input_feeding && a.type != "luong" && a.type != "scaled_dot")
    fail("model.input_feeding", "only applies to types 'luong' and 'scaled_dot', not '" + a.type + "'");

  // train
  const auto& t = c.train;
  in_range("train.epochs", t.epochs, 1, 100000);
  non_negative("train.max_steps", t.max_steps);
  non_negative("train.max_minutes", t.max_minutes);
  in_range("train.batch_size", t.batch_size, 1, 100000);
  positive("train.lr", t.lr);
  if (t.lr > 10) fail("train.lr", "must be <= 10, got " + std::to_string(t.lr));
  non_negative("train.clip_norm", t.clip_norm);
  in_range("train.teacher_forcing", t.teacher_forcing, 0, 1);
  if (!(t.label_smoothing >= 0 && t.label_smoothing < 1))
    fail("train.label_smoothing", "must be in [0, 1), got " + std::to_string(t.label_smoothing));
  if (t.seed < 0) fail("train.seed", "must be >= 0, got " + std::to_string(t.seed));
  non_negative("train.valid_every", t.valid_every);
  positive("train.log_every", t.log_every);
  in_range("train.valid_beam", t.valid_beam, 1, 100);
  check_choice("train.early_stopping.metric", t.early_stopping.metric, {"bleu", "ppl"});
  if (t.early_stopping.patience < 0) fail("train.early_stopping.patience", "must be >= 0 (0 = never stop early)");
  check_choice("train.lr_schedule.type", t.lr_schedule.type, {"none", "plateau"});
  if (!(t.lr_schedule.factor > 0 && t.lr_schedule.factor < 1))
    fail("train.lr_schedule.factor", "must be in (0, 1), got " + std::to_string(t.lr_schedule.factor));
  if (t.lr_schedule.patience < 0) fail("train.lr_schedule.patience", "must be >= 0");
  non_negative("train.lr_schedule.min_lr", t.lr_schedule.min_lr);

  // eval
  const auto& e = c.eval;
  in_range("eval.beam_size", e.beam_size, 1, 100);
  if (!(e.length_penalty >= 0 && e.length_penalty <= 5))
    fail("eval.length_penalty", "must be in [0, 5], got " + std::to_string(e.length_penalty));
  positive("eval.max_len_ratio", e.max_len_ratio);
  in_range("eval.batch_size", e.batch_size, 1, 100000);
  if (e.buckets.empty()) fail("eval.buckets", "must list at least one bucket edge");
  for (size_t i = 0; i < e.buckets.size(); ++i) {
    if (e.buckets[i] < 1) fail("eval.buckets[" + std::to_string(i) + "]", "must be >= 1");
    if (i > 0 && e.buckets[i] <= e.buckets[i - 1])
      fail("eval.buckets[" + std::to_string(i) + "]", "edges must be strictly increasing");
  }
}

json config_to_json(const Config& c) {
  json j;
  j["run_dir"] = c.run_dir;
  j["device"] = c.device;
  auto& d = j["data"];
  d["train"] = split_json(c.data.train);
  d["valid"] = split_json(c.data.valid);
  d["test"] = split_json(c.data.test);
  d["max_len"] = c.data.max_len;
  d["lowercase"] = c.data.lowercase;
  d["tokenizer"] = c.data.tokenizer;
  d["src_vocab"] = {{"min_freq", c.data.src_vocab.min_freq}, {"max_size", c.data.src_vocab.max_size}};
  d["tgt_vocab"] = {{"min_freq", c.data.tgt_vocab.min_freq}, {"max_size", c.data.tgt_vocab.max_size}};
  auto& m = j["model"];
  m["rnn"] = c.model.rnn;
  m["embed_dim"] = c.model.embed_dim;
  m["hidden_dim"] = c.model.hidden_dim;
  m["encoder_layers"] = c.model.encoder_layers;
  m["decoder_layers"] = c.model.decoder_layers;
  m["bidirectional"] = c.model.bidirectional;
  m["dropout"] = c.model.dropout;
  m["input_feeding"] = c.model.input_feeding;
  m["attention"] = {{"type", c.model.attention.type}, {"heads", c.model.attention.heads}, {"dim", c.model.attention.dim}};
  if (!c.model.attention.score.empty()) m["attention"]["score"] = c.model.attention.score;
  auto& t = j["train"];
  t["epochs"] = c.train.epochs;
  t["max_steps"] = c.train.max_steps;
  t["max_minutes"] = c.train.max_minutes;
  t["batch_size"] = c.train.batch_size;
  t["lr"] = c.train.lr;
  t["clip_norm"] = c.train.clip_norm;
  t["teacher_forcing"] = c.train.teacher_forcing;
  t["label_smoothing"] = c.train.label_smoothing;
  t["seed"] = c.train.seed;
  t["valid_every"] = c.train.valid_every;
  t["log_every"] = c.train.log_every;
  t["valid_beam"] = c.train.valid_beam;
  t["early_stopping"] = {{"metric", c.train.early_stopping.metric}, {"patience", c.train.early_stopping.patience}};
  t["lr_schedule"] = {{"type", c.train.lr_schedule.type},
                      {"factor", c.train.lr_schedule.factor},
                      {"patience", c.train.lr_schedule.patience},
                      {"min_lr", c.train.lr_schedule.min_lr}};
  auto& e = j["eval"];
  e["beam_size"] = c.eval.beam_size;
  e["length_penalty"] = c.eval.length_penalty;
  e["max_len_ratio"] = c.eval.max_len_ratio;
  e["batch_size"] = c.eval.batch_size;
  e["buckets"] = c.eval.buckets;
  return j;
}

void apply_override(json& j, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--set: expected key.path=value, got '" + assignment + "'");
  std::string key = assignment.substr(0, eq);
  std::string raw = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(raw);
  } catch (const json::exception&) {  // parse errors, and numbers out of double's range (1e400)
    value = raw;  // not JSON: a plain string such as a path; validation then names the key
  }
  json* node = &j;
  std::string path;
  std::stringstream ss(key);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) throw UsageError("--set: empty component in key '" + key + "'");
    path += (i ? "." : "") + parts[i];
    if (!node->is_object()) throw UsageError("--set " + key + ": '" + path + "' is not an object");
    if (i + 1 == parts.size()) {
      (*node)[parts[i]] = value;
    } else {
      if (!node->contains(parts[i])) (*node)[parts[i]] = json::object();
      node = &(*node)[parts[i]];
    }
  }
}

json read_json_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError(file + ": cannot open file");
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return json::parse(buf.str());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers such as 1e400
    std::string msg = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] "; keep the readable part.
    auto pos = msg.find("] ");
    throw UsageError(file + ": invalid JSON: " + (pos == std::string::npos ? msg : msg.substr(pos + 2)));
  }
}

Config load_config(const std::string& file, const std::vector<std::string>& overrides) {
  json j = file.empty() ? json::object() : read_json_file(file);
  if (!j.is_object()) throw UsageError((file.empty() ? "config" : file) + ": expected a JSON object at the top level");
  for (const auto& o : overrides) apply_override(j, o);
  try {
    return config_from_json(j);
  } catch (const UsageError& e) {
    if (file.empty()) throw;
    throw UsageError(file + ": " + e.what());
  }
}

void check_data_files(const Config& c, bool for_training) {
  if (for_training) {
    if (c.data.train.src.empty() && c.data.train.tsv.empty()) fail("data.train", "no training data (give src/tgt or tsv)");
    if (c.data.valid.src.empty() && c.data.valid.tsv.empty()) fail("data.valid", "no validation data (give src/tgt or tsv)");
    check_split_files("data.train", c.data.train);
    check_split_files("data.valid", c.data.valid);
  }
  check_split_files("data.test", c.data.test);
}

}  // namespace attnmt
