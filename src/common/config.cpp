#include "common/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "common/config_keys.h"
#include "common/errors.h"

namespace attnmt {

namespace {
using nlohmann::json;
}  // namespace

std::string to_string(RnnCell c) { return c == RnnCell::kLstm ? "lstm" : "gru"; }
std::string to_string(AttentionType t) {
  switch (t) {
    case AttentionType::kNone: return "none";
    case AttentionType::kBahdanau: return "bahdanau";
    case AttentionType::kLuong: return "luong";
    case AttentionType::kScaledDot: return "scaled_dot";
  }
  return "?";
}
std::string to_string(LuongScore s) {
  switch (s) {
    case LuongScore::kDefault: return "";
    case LuongScore::kDot: return "dot";
    case LuongScore::kGeneral: return "general";
    case LuongScore::kConcat: return "concat";
  }
  return "?";
}

std::string to_string(LayerType t) { return t == LayerType::kSelfAttention ? "self_attention" : "rnn"; }
std::string to_string(Positions p) {
  switch (p) {
    case Positions::kSinusoidal: return "sinusoidal";
    case Positions::kLearned: return "learned";
    case Positions::kNone: return "none";
  }
  return "?";
}

namespace {
template <class E>
E parse_enum(const std::string& s, const std::vector<E>& values, const char* what) {
  std::vector<std::string> names;
  for (E e : values) {
    if (to_string(e) == s) return e;
    names.push_back(to_string(e));
  }
  throw UsageError(std::string("unknown ") + what + " '" + s + "'. Valid options: " + config_detail::join(names));
}
template <class E>
E parse_enum(const std::string& s, std::initializer_list<E> values, const char* what) {
  return parse_enum(s, std::vector<E>(values), what);
}
}  // namespace

RnnCell rnn_cell_from_string(const std::string& s) { return parse_enum(s, {RnnCell::kGru, RnnCell::kLstm}, "cell"); }
const std::vector<AttentionType>& attention_types() {
  static const std::vector<AttentionType> types = {AttentionType::kNone, AttentionType::kBahdanau, AttentionType::kLuong,
                                                   AttentionType::kScaledDot};
  return types;
}
AttentionType attention_type_from_string(const std::string& s) { return parse_enum(s, attention_types(), "attention type"); }
LayerType layer_type_from_string(const std::string& s) {
  return parse_enum(s, {LayerType::kRnn, LayerType::kSelfAttention}, "layer type");
}
Positions positions_from_string(const std::string& s) {
  return parse_enum(s, {Positions::kSinusoidal, Positions::kLearned, Positions::kNone}, "positions");
}
LuongScore luong_score_from_string(const std::string& s) {
  return parse_enum(s, {LuongScore::kDot, LuongScore::kGeneral, LuongScore::kConcat}, "attention score");
}

LuongScore effective_score(const AttentionConfig& a) {
  if (a.type != AttentionType::kLuong) return LuongScore::kDefault;
  return a.score == LuongScore::kDefault ? LuongScore::kGeneral : a.score;
}

int effective_attention_dim(const ModelConfig& m) { return m.attention.dim > 0 ? m.attention.dim : m.hidden_dim; }

std::string config_key(const Config& c, const void* field) {
  for (const auto& k : config_detail::keys())
    if (k.address(c) == field) return k.path;
  throw std::logic_error("config_key: not the address of a config key");
}

Config config_from_json(const json& j) {
  Config c;
  config_detail::read_section(c, j, "");
  validate(c);
  return c;
}

json config_to_json(const Config& c) {
  json j = json::object();
  const Config defaults;
  for (const auto& k : config_detail::keys()) {
    json v = k.get(c);
    if (!k.write_default && v == k.get(defaults)) continue;
    config_detail::set_path(j, k.path, std::move(v));
  }
  return j;
}

std::string config_split_path(const Config& c, const SplitConfig& split) {
  return config_detail::parent_of(config_key(c, &split.src));
}

bool same_model_and_data(const Config& a, const Config& b) {
  json ja = config_to_json(a), jb = config_to_json(b);
  return ja["model"] == jb["model"] && ja["data"] == jb["data"];
}

std::string describe_model(const ModelConfig& m) {
  auto side = [&](const StackConfig& s, int layers, bool decoder) {
    if (s.type == LayerType::kRnn) return to_string(m.rnn) + (decoder ? " decoder" : m.bidirectional ? " encoder (bidirectional)" : " encoder");
    std::string d = "self_attention " + std::string(decoder ? "decoder" : "encoder") + " (" + std::to_string(layers) + " layers, " +
                    std::to_string(s.heads) + " heads, " + to_string(s.positions) + " positions";
    if (decoder && !s.causal_mask) d += ", causal mask OFF: training sees the next words";
    return d + ")";
  };
  std::string a = to_string(m.attention.type) + " attention";
  if (m.attention.type == AttentionType::kNone) a = "no attention (fixed context)";
  if (!m.attention.scale) a += ", unscaled";
  if (!m.attention.mask) a += ", padding unmasked";
  const std::string tied = m.tie_output ? ", output layer tied to the target embeddings" : "";
  return side(m.encoder, m.encoder_layers, false) + ", " + side(m.decoder, m.decoder_layers, true) + ", " + a + tied;
}

namespace {

// data: a split is src and tgt, or a TSV file; SentencePiece models come in pairs.
void validate_data(const Config& c) {
  auto key = [&](const auto& field) { return config_key(c, &field); };
  for (const SplitConfig* s : {&c.data.train, &c.data.valid, &c.data.test}) {
    if (!s->tsv.empty() && (!s->src.empty() || !s->tgt.empty())) config_detail::fail(key(s->tsv), "give either tsv or src/tgt, not both");
    if (s->src.empty() != s->tgt.empty()) config_detail::fail(s->src.empty() ? key(s->src) : key(s->tgt), "src and tgt must be given together");
  }
  if (c.train.batch_tokens > 0 && c.train.batch_size != Config().train.batch_size)
    config_detail::fail(key(c.train.batch_tokens), "give either " + key(c.train.batch_size) + " or batch_tokens, not both");
  const SpmConfig& spm = c.data.spm;
  if (spm.src_model.empty() != spm.tgt_model.empty())
    config_detail::fail(spm.src_model.empty() ? key(spm.src_model) : key(spm.tgt_model), "src_model and tgt_model must be given together");
}

// Every key set away from its default where it means nothing (Key::applies says where each applies).
void validate_applicability(const Config& c) {
  const Config defaults;
  for (const auto& k : config_detail::keys()) {
    if (!k.applies || k.get(c) == k.get(defaults)) continue;
    const std::string why = k.applies(c);
    if (!why.empty()) config_detail::fail(k.path, why);
  }
}

// model.attention: the heads divide the attention dimension (where each key applies is validate_applicability's).
void validate_attention(const Config& c) {
  const auto& m = c.model;
  const auto& a = m.attention;
  if (a.type == AttentionType::kScaledDot && effective_attention_dim(m) % a.heads != 0)
    config_detail::fail(config_key(c, &a.heads), std::to_string(a.heads) + " heads do not divide the attention dimension " +
                                                    std::to_string(effective_attention_dim(m)));
}

// model.encoder / model.decoder: RNN or self-attention stacks, each key only where its layer type reads it.
void validate_stacks(const Config& c) {
  auto key = [&](const auto& field) { return config_key(c, &field); };
  const auto& m = c.model;
  if (m.encoder.type == LayerType::kRnn && m.bidirectional && m.hidden_dim % 2 != 0)
    config_detail::fail(key(m.hidden_dim), "must be even with a bidirectional encoder (each direction gets hidden_dim/2), got " +
                                std::to_string(m.hidden_dim));
  for (const StackConfig* st : {&m.encoder, &m.decoder})
    if (st->type == LayerType::kSelfAttention && m.hidden_dim % st->heads != 0)
      config_detail::fail(key(st->heads), std::to_string(st->heads) + " heads do not divide hidden_dim " + std::to_string(m.hidden_dim));
  if (m.decoder.type == LayerType::kSelfAttention && m.attention.type != AttentionType::kScaledDot)
    config_detail::fail(key(m.attention.type), "a self_attention decoder attends to the source with scaled dot-product attention: use "
                                "'scaled_dot', not '" + to_string(m.attention.type) + "'");
}

}  // namespace

void validate(const Config& c) {
  for (const auto& k : config_detail::keys()) k.check(c);
  validate_data(c);
  validate_applicability(c);
  validate_attention(c);
  validate_stacks(c);
}

std::string config_keys_markdown() {
  const Config defaults;
  std::ostringstream o;
  o << "| key | type | default | applies to | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : config_detail::keys()) {
    json d = k.get(defaults);
    std::string shown = d.is_string() && d.get<std::string>().empty() ? "not given" : "`" + d.dump() + "`";
    o << "| `" << k.path << "` | " << k.type << " | " << shown << " | " << (k.when.empty() ? "all" : k.when) << " | " << k.doc << " |\n";
  }
  return o.str();
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

namespace {

// A parser callback that refuses an object with the same key twice (the JSON library would keep the last value
// silently), naming the key by its path.
class DuplicateKeyCheck {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames_.push_back({true, {}, ""}); break;
      case json::parse_event_t::array_start: frames_.push_back({false, {}, ""}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: frames_.pop_back(); break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.seen.insert(f.key).second) throw UsageError("duplicated key " + path() + " (give each key once)");
        break;
      }
      default: break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> seen;
    std::string key;  // the member being read
  };
  std::string path() const {
    std::string p;
    for (const auto& f : frames_) p += f.object ? (p.empty() ? "" : ".") + f.key : std::string("[]");
    return p;
  }
  std::vector<Frame> frames_;
};

}  // namespace

json read_json_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError(file + ": cannot open file");
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    DuplicateKeyCheck check;
    return json::parse(buf.str(), [&check](int depth, json::parse_event_t event, json& parsed) {
      return check(depth, event, parsed);
    });
  } catch (const UsageError& e) {
    throw UsageError(file + ": " + e.what());
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
  auto key = [&](const std::string& field) { return config_key(c, &field); };
  auto check_split = [&](const SplitConfig& s) {
    for (const std::string* f : {&s.src, &s.tgt, &s.tsv, &s.align}) {
      std::error_code ec;
      if (f->empty() || std::filesystem::is_regular_file(*f, ec)) continue;
      config_detail::fail(key(*f), (std::filesystem::exists(*f, ec) ? "not a regular file: " : "file not found: ") + *f);
    }
  };
  if (for_training) {
    for (const SplitConfig* s : {&c.data.train, &c.data.valid})
      if (s->src.empty() && s->tsv.empty())
        config_detail::fail(config_detail::parent_of(key(s->src)),
                            std::string("no ") + (s == &c.data.train ? "training" : "validation") + " data (give src/tgt or tsv)");
    check_split(c.data.train);
    check_split(c.data.valid);
  }
  check_split(c.data.test);
}

}  // namespace attnmt
