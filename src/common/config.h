// Typed configuration: one struct per JSON section. Every key is declared once, in the key table of
// config.cpp (path, type, range or choices, one-line doc), which drives strict parsing, validate(),
// writing config.json and the key list of configs/README.md (config_keys_markdown()). Defaults are the
// member initializers below.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnmt {

struct SplitConfig {
  std::string src;    // source-side plain-text file (one sentence per line)
  std::string tgt;    // target-side plain-text file, line-aligned with src
  std::string tsv;    // alternative to src/tgt: a TSV file "src<TAB>tgt[<TAB>...]"
  std::string align;  // optional gold alignments, Pharaoh format "i-j" (0-based src-tgt)
};

struct VocabConfig {
  int min_freq = 1;  // drop tokens seen fewer times than this
  int max_size = 0;  // keep at most this many tokens besides the specials (0 = no limit)
};

// SentencePiece subword units (data.tokenizer "sentencepiece").
struct SpmConfig {
  int vocab_size = 8000;               // pieces per model (one per side, or one joint model)
  std::string model_type = "unigram";  // unigram | bpe
  bool joint = false;                  // one model trained on both sides
  double character_coverage = 1.0;     // share of characters the model covers (the rest map to <unk>)
  std::string src_model, tgt_model;    // user-supplied .model files instead of training (both or neither)
};

struct DataConfig {
  SplitConfig train;              // training pairs (required for train)
  SplitConfig valid;              // validation pairs (required for train)
  SplitConfig test;               // test pairs (used by evaluate)
  int max_len = 80;               // drop training pairs longer than this many tokens on either side
  bool lowercase = false;         // lowercase text before tokenizing
  std::string tokenizer = "13a";  // "space" (pre-tokenized text), "13a" (sacreBLEU-style) or "sentencepiece"
  SpmConfig spm;                  // sentencepiece only
  VocabConfig src_vocab;          // source vocabulary limits
  VocabConfig tgt_vocab;          // target vocabulary limits
};

enum class RnnCell { kGru, kLstm };
enum class AttentionType { kNone, kBahdanau, kLuong, kScaledDot };
// kDefault: not given (luong then scores with "general"); any other value applies to luong only.
enum class LuongScore { kDefault, kDot, kGeneral, kConcat };
// What an encoder or decoder is built from: recurrent layers, or self-attention layers (Vaswani et al. 2017).
enum class LayerType { kRnn, kSelfAttention };
// How a self-attention stack learns word order: fixed sinusoids, a learned vector per position, or not at all
// (the lab's pitfall: a position-free encoder is permutation-equivariant).
enum class Positions { kSinusoidal, kLearned, kNone };

// The names used in configs, checkpoints and messages ("gru", "scaled_dot", "general"; kDefault is "").
std::string to_string(RnnCell c);
std::string to_string(AttentionType t);
std::string to_string(LuongScore s);
std::string to_string(LayerType t);
std::string to_string(Positions p);
// The inverse; UsageError listing the valid names on anything else.
RnnCell rnn_cell_from_string(const std::string& s);
AttentionType attention_type_from_string(const std::string& s);
// Every attention type, in the order the documentation lists them.
const std::vector<AttentionType>& attention_types();
LuongScore luong_score_from_string(const std::string& s);
LayerType layer_type_from_string(const std::string& s);
Positions positions_from_string(const std::string& s);

struct AttentionConfig {
  AttentionType type = AttentionType::kBahdanau;
  LuongScore score = LuongScore::kDefault;  // luong only: dot | general | concat (default general)
  int heads = 1;                  // scaled_dot only: number of heads
  int dim = 0;                    // attention dimension for bahdanau/concat/scaled_dot (0 = hidden_dim)
  // Experiment keys (the attention lab): what the lesson says breaks without them.
  bool scale = true;              // scaled_dot only: divide the scores by sqrt(d_k)
  bool mask = true;               // padded source positions get weight exactly 0 (false: they take part in the softmax)
};

// The sizes of a self-attention stack (encoder or decoder side); its width is model.hidden_dim and its depth
// model.encoder_layers / model.decoder_layers.
struct StackConfig {
  LayerType type = LayerType::kRnn;
  Positions positions = Positions::kSinusoidal;  // self_attention only
  int heads = 4;                                 // self_attention only: self-attention heads
  int ff_dim = 0;                                // self_attention only: feed-forward size (0 = 4 x hidden_dim)
  bool causal_mask = true;                       // decoder only: position t sees positions <= t (false: the pitfall)
};

struct ModelConfig {
  RnnCell rnn = RnnCell::kGru;
  int embed_dim = 64;        // embedding size (source and target)
  int hidden_dim = 128;      // decoder hidden size; encoder per-direction size is hidden/2 when bidirectional
  int encoder_layers = 1;    // stacked encoder RNN layers
  int decoder_layers = 1;    // stacked decoder RNN layers
  bool bidirectional = true; // bidirectional encoder
  double dropout = 0.1;      // dropout on embeddings, between layers and before the output layer
  bool input_feeding = false;  // luong/scaled_dot: feed the attentional state into the next step
  bool tie_output = false;     // the output layer's weights are the target embeddings (needs hidden_dim == embed_dim)
  AttentionConfig attention; // how the decoder gets its context
  StackConfig encoder;       // model.encoder.*: rnn (default) or self_attention
  StackConfig decoder;       // model.decoder.*: rnn (default) or self_attention
};

struct EarlyStoppingConfig {
  std::string metric = "bleu";  // bleu | ppl: the validation metric that picks best.pt
  int patience = 0;             // stop after this many validations without improvement (0 = never)
};

struct LrScheduleConfig {
  std::string type = "none";  // none | plateau | step
  double factor = 0.5;        // plateau, step: multiply the learning rate by this
  int patience = 1;           // plateau: validations without improvement before reducing
  double min_lr = 1e-6;       // plateau, step: never go below this
  int start = 0;              // step: reduce the rate after this update (0: first after `every` updates)
  int every = 1000;           // step: then after every this many updates
  int warmup = 0;             // any type: the rate rises linearly to train.lr over this many first updates (0 = none)
};

struct TrainConfig {
  int epochs = 10;               // passes over the training data
  long max_steps = 0;            // stop after this many updates (0 = no limit)
  double max_minutes = 0;        // stop after this much wall-clock time (0 = no limit)
  int batch_size = 32;           // sentence pairs per batch
  int batch_tokens = 0;          // instead: padded target tokens per batch (0 = use batch_size)
  double lr = 1e-3;              // Adam learning rate
  double clip_norm = 1.0;        // gradient clipping by global norm (0 = off)
  double teacher_forcing = 1.0;  // probability of feeding the gold previous token
  double label_smoothing = 0.0;  // label smoothing of the cross-entropy loss
  int seed = 1;                  // seed for initialisation, shuffling and dropout
  long valid_every = 0;          // validate every this many steps, and at each epoch end (0 = epoch end only)
  long log_every = 50;           // plain log line every this many steps when not on a terminal
  int keep_checkpoints = 0;      // keep the last N checkpoints ckpt-<step>.pt written at validations (0 = none)
  int snapshot_sentences = 2;    // validation sentences whose attention maps are kept at every validation
  std::string precision = "fp32";  // fp32 | tf32 | bf16 (common/precision.h)
  EarlyStoppingConfig early_stopping;  // when to stop, which checkpoint is best
  LrScheduleConfig lr_schedule;        // learning-rate schedule
};

struct EvalConfig {
  int beam_size = 5;            // beam width (1 = greedy)
  double length_penalty = 1.0;  // GNMT length penalty alpha ((5+len)/6)^alpha; 0 = raw log-prob
  double max_len_ratio = 1.5;   // decode at most max_len_ratio * src_len + 10 tokens
  int batch_size = 64;          // sentences decoded at once
  std::vector<int> buckets = {10, 20, 30, 40, 50, 60};  // upper edges of source-length buckets
};

struct Config {
  std::string run_dir = "runs/default";  // where checkpoints, vocabularies, logs and metrics go
  std::string device = "auto";           // auto | cpu | cuda | cuda:N
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  EvalConfig eval;
};

// Parses a config JSON object strictly: unknown keys, wrong types and bad values throw
// UsageError naming the JSON path. Calls validate().
Config config_from_json(const nlohmann::json& j);
nlohmann::json config_to_json(const Config& c);

// Cross-field and range checks; throws UsageError naming the path.
void validate(const Config& c);

// Applies "key.path=value" overrides to a JSON tree (value parsed as JSON, else taken as a string).
void apply_override(nlohmann::json& j, const std::string& assignment);

// Reads FILE (if non-empty), applies overrides, parses and validates.
Config load_config(const std::string& file, const std::vector<std::string>& overrides);

// Reads a JSON file; throws UsageError naming the file on a missing file or a syntax error.
nlohmann::json read_json_file(const std::string& file);

// The JSON path of a config field, e.g. config_key(c, &c.train.lr) == "train.lr" (for messages outside
// config.cpp, so that a key is spelled only in the key table). Throws std::logic_error for a non-key address.
std::string config_key(const Config& c, const void* field);

// The JSON path of one of c's data splits, e.g. "data.train".
std::string config_split_path(const Config& c, const SplitConfig& split);

// True when the model and data sections of a and b are the same (what resuming a run requires).
bool same_model_and_data(const Config& a, const Config& b);

// The model in a few words for logs and `evaluate`: "gru encoder, gru decoder, bahdanau attention", with the
// self-attention stacks' sizes and any experiment key that is off ("causal mask OFF").
std::string describe_model(const ModelConfig& m);

// The markdown table of every key (key, type, default, where it applies, meaning) that configs/README.md holds between
// the lines "<!-- keys:begin -->" and "<!-- keys:end -->".
std::string config_keys_markdown();

// Checks that the data files a config names exist (what train needs, or only the test split).
void check_data_files(const Config& c, bool for_training);

// Effective attention score: luong's score (general when not given); kDefault for other types.
LuongScore effective_score(const AttentionConfig& a);
// Effective attention dimension (dim, or hidden_dim when 0).
int effective_attention_dim(const ModelConfig& m);

}  // namespace attnmt
