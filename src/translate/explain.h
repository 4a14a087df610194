// attnmt explain: one attention step of a trained model, the way the lesson computes it, with the model's own numbers.
// A query is compared with every key (a score per source token), the scores are scaled, a softmax turns them into
// weights that sum to one, and the context is the weighted sum of the values: a soft dictionary lookup. The query,
// scores, weights and context are what the decoder's forward pass computed at that step (the attention mechanism
// hands them over: AttentionImpl::observe); the weighted sum is formed again here from the weights and values and
// must come out as the decoder's context (context_check).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/loaded_run.h"

namespace attnmt {

struct ExplainOptions {
  int64_t step = 0;  // the target position explained, 1-based (translation length + 1: the step that ends it)
  std::string word;  // or the first step that produced this target token (step and word: neither given means step 1)
  int beam = 0;      // the decoding's beam (0: the run's eval.beam_size)
  // Which attention: "cross" (default: the decoder's attention over the source), or a self-attention stack's own,
  // "encoder" (a source position over the source; step and word then pick the source position) or "decoder" (a
  // target position over the target prefix, under the causal mask).
  std::string part = "cross";
  int64_t layer = 0;  // a self-attention stack's layer, 1-based (0: the last)
};

// One head's lookup over the source tokens (one head for Bahdanau and Luong).
struct HeadLookup {
  std::vector<double> scores;   // per source token, before scaling: q.k (dot), q.W k (general), v.tanh(W q + U k)
  std::vector<double> scaled;   // the scores times the scale: what the softmax takes
  std::vector<double> weights;  // softmax(scaled): sum to one
  std::vector<double> context;  // sum over source tokens of weight x value (this head's values)
  // A self-attention stack's layer: this head's weights for every query position of the pass [positions][keys] (the
  // row explained among them; the decoder's own: the causal triangle). Empty for an RNN decoder's one step.
  std::vector<std::vector<double>> map;
};

struct StepExplanation {
  std::string mechanism;       // the attention type and score function (AttentionTraits::label)
  std::string score_formula;   // how a score is formed, in the lesson's notation
  std::string query_is;        // which state queried: s_{t-1} (Bahdanau) or s_t (Luong, scaled dot-product)
  std::string scale_reason;    // why the scores are (or need not be) scaled
  std::vector<std::string> source, target;  // the model's tokens; target is its own translation of the source
  std::string part = "cross";  // as ExplainOptions::part
  int64_t layer = 0, layers = 0;  // the layer explained, 1-based, of how many (a self-attention stack; else 0)
  std::vector<std::string> keys;  // the tokens the query is compared with: the source, or <bos> and the translation
  std::vector<bool> masked;       // per key: hidden by the causal mask (weight exactly 0; its score plays no part)
  std::string query_token;        // the token at the querying position (self-attention parts: the query's own)
  std::vector<std::string> rows;  // with HeadLookup::map: the query positions' tokens (cross: each step's output)
  int64_t step = 0;            // 1-based (part encoder: the source position)
  std::string produced;        // the token the model produced at that step (<eos> after the last)
  std::vector<double> query;   // the decoder state that queried
  double scale = 1.0;          // the factor applied to the scores
  std::vector<HeadLookup> heads;  // one per head; empty without attention
  std::vector<double> context;    // the context the decoder used at this step (none: the one fixed vector)
  double context_check = 0;       // largest |decoder's context - the context formed here from weights and values|
};

// The model's translation of sentence (its search, the run's beam unless opt.beam), and the attention step
// opt.step / opt.word of it explained, in the attention opt.part names. UsageError: an empty sentence, a step past the
// translation's end, a word the translation lacks, a part or layer the model does not have.
StepExplanation explain_step(LoadedRun& run, const std::string& sentence, const ExplainOptions& opt);
// Every field, vectors whole (`explain --format json`, POST /translator/explain).
nlohmann::json explanation_json(const StepExplanation& e);

// The tutorial's worked example through the scaled dot-product function the models use: the query [1, 0, 1, 0],
// the keys [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 0] and the values 10, 20, 30: scores [2, 0, 1], scaled by 1/sqrt(4)
// to [1, 0, 0.5], weights [0.506, 0.186, 0.307], output 18.0.
struct WorkedExample {
  std::vector<double> query;
  std::vector<std::vector<double>> keys;
  std::vector<double> values;
  double scale = 1.0;
  HeadLookup lookup;  // lookup.context: the output, one number
};
WorkedExample worked_example();

}  // namespace attnmt
