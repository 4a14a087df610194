// Typed configuration: one struct per JSON section, strict parsing, one validate().
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

struct DataConfig {
  SplitConfig train;              // training pairs (required for train)
  SplitConfig valid;              // validation pairs (required for train)
  SplitConfig test;               // test pairs (used by evaluate)
  int max_len = 80;               // drop training pairs longer than this many tokens on either side
  bool lowercase = false;         // lowercase text before tokenizing
  std::string tokenizer = "13a";  // "space" (pre-tokenized text) or "13a" (sacreBLEU-style)
  VocabConfig src_vocab;          // source vocabulary limits
  VocabConfig tgt_vocab;          // target vocabulary limits
};

struct AttentionConfig {
  std::string type = "bahdanau";  // none | bahdanau | luong | scaled_dot
  std::string score;              // luong only: dot | general | concat (default general)
  int heads = 1;                  // scaled_dot only: number of heads
  int dim = 0;                    // attention dimension for bahdanau/concat/scaled_dot (0 = hidden_dim)
};

struct ModelConfig {
  std::string rnn = "gru";   // gru | lstm
  int embed_dim = 64;        // embedding size (source and target)
  int hidden_dim = 128;      // decoder hidden size; encoder per-direction size is hidden/2 when bidirectional
  int encoder_layers = 1;    // stacked encoder RNN layers
  int decoder_layers = 1;    // stacked decoder RNN layers
  bool bidirectional = true; // bidirectional encoder
  double dropout = 0.1;      // dropout on embeddings, between layers and before the output layer
  bool input_feeding = false;  // luong/scaled_dot: feed the attentional state into the next step
  AttentionConfig attention; // how the decoder gets its context
};

struct EarlyStoppingConfig {
  std::string metric = "bleu";  // bleu | ppl: the validation metric that picks best.pt
  int patience = 0;             // stop after this many validations without improvement (0 = never)
};

struct LrScheduleConfig {
  std::string type = "none";  // none | plateau
  double factor = 0.5;        // plateau: multiply the learning rate by this
  int patience = 1;           // plateau: validations without improvement before reducing
  double min_lr = 1e-6;       // plateau: never go below this
};

struct TrainConfig {
  int epochs = 10;               // passes over the training data
  long max_steps = 0;            // stop after this many updates (0 = no limit)
  double max_minutes = 0;        // stop after this much wall-clock time (0 = no limit)
  int batch_size = 32;           // sentence pairs per batch
  double lr = 1e-3;              // Adam learning rate
  double clip_norm = 1.0;        // gradient clipping by global norm (0 = off)
  double teacher_forcing = 1.0;  // probability of feeding the gold previous token
  double label_smoothing = 0.0;  // label smoothing of the cross-entropy loss
  int seed = 1;                  // seed for initialisation, shuffling and dropout
  long valid_every = 0;          // validate every this many steps, and at each epoch end (0 = epoch end only)
  long log_every = 50;           // plain log line every this many steps when not on a terminal
  int valid_beam = 1;            // beam size for the validation BLEU (1 = greedy)
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

// Checks that the data files a config names exist (what train needs, or only the test split).
void check_data_files(const Config& c, bool for_training);

// Effective attention score for luong ("general" when unset).
std::string effective_score(const AttentionConfig& a);
// Effective attention dimension (dim, or hidden_dim when 0).
int effective_attention_dim(const ModelConfig& m);

}  // namespace attnmt
