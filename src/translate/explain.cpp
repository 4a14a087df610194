#include "translate/explain.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "common/host.h"
#include "data/batcher.h"
#include "data/special_tokens.h"
#include "model/attention.h"
#include "translate/translator.h"

namespace attnmt {

namespace {

std::vector<double> host_doubles(const torch::Tensor& t) { return host_vector<double>(t.to(torch::kDouble).reshape({-1})); }

// What one attend() call was given and gave.
struct ObservedCall {
  torch::Tensor query;
  AttentionMemory mem;
  AttentionOutput out;
};

// Observes the mechanism's attend() calls while it lives, keeping call number `wanted` (0-based).
class StepObserver {
 public:
  StepObserver(AttentionImpl* mechanism, int64_t wanted) : mechanism_(mechanism) {
    if (mechanism_ == nullptr) return;
    mechanism_->observe([this, wanted](const torch::Tensor& q, const AttentionMemory& mem, const AttentionOutput& out) {
      if (calls_++ == wanted) call_ = {q, mem, out};
    });
  }
  ~StepObserver() {
    if (mechanism_ != nullptr) mechanism_->observe({});
  }
  StepObserver(const StepObserver&) = delete;
  StepObserver& operator=(const StepObserver&) = delete;
  const ObservedCall& call() const { return call_; }

 private:
  AttentionImpl* mechanism_;
  int64_t calls_ = 0;
  ObservedCall call_;
};

// The weighted sum of the values [S, V] with weights [S].
std::vector<double> weighted_sum(const std::vector<double>& w, const torch::Tensor& values) {
  const int64_t S = values.size(0), V = values.size(1);
  const std::vector<double> v = host_doubles(values);
  std::vector<double> c(static_cast<size_t>(V), 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < V; ++j) c[static_cast<size_t>(j)] += w[static_cast<size_t>(s)] * v[static_cast<size_t>(s * V + j)];
  return c;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// The lesson's words for each mechanism (AttentionTraits, beside the factory).
void describe(const AttentionConfig& a, StepExplanation* e) {
  const AttentionTraits traits = attention_traits(a);
  e->score_formula = traits.score_formula;
  e->scale_reason = traits.scale_reason;
  e->query_is = !traits.attends    ? "nothing queries"
                : traits.after_rnn ? "s_t, the decoder's new state"
                                   : "s_{t-1}, the decoder's previous state";
}

// The step to explain (0-based) among the translation's steps (its tokens and the <eos> step).
int64_t chosen_step(const std::vector<std::string>& target, const ExplainOptions& opt) {
  const int64_t steps = static_cast<int64_t>(target.size()) + 1;
  if (!opt.word.empty()) {
    const auto it = std::find(target.begin(), target.end(), opt.word);
    if (it == target.end()) throw UsageError("explain: the translation has no word '" + opt.word + "'");
    return it - target.begin();
  }
  const int64_t step = opt.step == 0 ? 1 : opt.step;
  if (step < 1 || step > steps)
    throw UsageError("explain: --step must be between 1 and " + std::to_string(steps) + " (the translation has " +
                     std::to_string(target.size()) + " tokens, and one more step ends it), got " + std::to_string(step));
  return step - 1;
}

// The heads of an observed call: its scores, weights and the weighted sums of its values, in double.
void lookups(const ObservedCall& c, AttentionImpl* mechanism, StepExplanation* e) {
  const bool multi = c.out.head_weights.defined();
  const int64_t H = multi ? c.out.head_weights.size(1) : 1;
  e->scale = mechanism->score_scale();
  std::vector<torch::Tensor> head_contexts;
  for (int64_t h = 0; h < H; ++h) {
    HeadLookup l;
    const torch::Tensor w = multi ? c.out.head_weights[0][h][0] : c.out.weights[0][0];  // [S]
    const torch::Tensor sc = multi ? c.out.scores[0][h][0] : c.out.scores[0][0];
    const torch::Tensor values = multi ? c.mem.values[0][h] : c.mem.values[0];  // [S, V]
    l.weights = host_doubles(w);
    l.scaled = host_doubles(sc);
    // The forward pass keeps the scores as the softmax takes them (scaled, for scaled dot-product).
    for (double s : l.scaled) l.scores.push_back(e->scale != 0 ? s / e->scale : s);
    l.context = weighted_sum(l.weights, values);
    head_contexts.push_back(torch::tensor(l.context, torch::kDouble));
    e->heads.push_back(std::move(l));
  }
  std::vector<double> formed;
  {  // several heads: W_o [c_1; ...; c_h], the heads' sums joined and projected back
    torch::NoGradGuard ng;
    const torch::Tensor joined = torch::stack(head_contexts).to(c.out.context.scalar_type()).to(c.out.context.device());
    formed = host_doubles(mechanism->join_heads(joined.view({1, H, 1, -1})));
  }
  e->context = host_doubles(c.out.context);
  e->context_check = largest_difference(e->context, formed);
}

}  // namespace

StepExplanation explain_step(LoadedRun& run, const std::string& sentence, const ExplainOptions& opt) {
  if (run.model->decoder->is_self_attention())
    throw UsageError("explain: this run's decoder is a stack of self-attention layers; explain covers RNN decoders "
                     "(bahdanau, luong, scaled_dot, none) for now");
  StepExplanation e;
  const AttentionConfig& a = run.cfg.model.attention;
  e.mechanism = attention_traits(a).label;
  describe(a, &e);
  const Translator translator(run, search_options(run.cfg.eval, opt.beam));
  const std::vector<std::vector<std::string>> src = translator.tokenize({sentence});
  if (src.at(0).empty()) throw UsageError("explain: --src is empty");
  const Translation t = translator.nbest_tokens(src).at(0).at(0);
  e.source = t.src_tokens;
  e.target = t.tgt_tokens;
  const int64_t step = chosen_step(e.target, opt);
  e.step = step + 1;
  e.produced = step < static_cast<int64_t>(e.target.size()) ? e.target[static_cast<size_t>(step)] : "<eos>";

  // The decoder forced along its own translation up to the step, as the search ran it.
  torch::NoGradGuard ng;
  const ScopedAttentionMaps maps(true);
  const std::vector<std::vector<int64_t>> ids = {run.src_vocab.encode(e.source)};
  const std::vector<int64_t> tgt = run.tgt_vocab.encode(e.target);
  Seq2Seq& model = run.model;
  const Batch batch = make_src_batch(ids, {0}).to(run.device);
  const EncoderOutput enc = model->encode(batch.src, batch.src_len, batch.src_mask);
  DecoderState state = model->decoder->init_state(enc);
  const AttentionMemory mem = model->decoder->prepare(enc);
  AttentionImpl* mechanism = model->decoder->attention();
  const StepObserver observer(mechanism, step);
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(run.device);
  torch::Tensor y = torch::full({1}, kBosId, on);
  for (int64_t i = 0; i <= step; ++i) {
    model->decoder->step(y, state, mem);
    if (i < static_cast<int64_t>(tgt.size())) y = torch::full({1}, tgt[static_cast<size_t>(i)], on);
  }
  if (mechanism == nullptr) {  // none: the fixed context, the same at every step
    e.context = host_doubles(state.fixed);
    return e;
  }
  const ObservedCall& c = observer.call();
  TORCH_CHECK(c.out.weights.defined() || c.out.head_weights.defined(), "explain: the attention step was not observed");
  e.query = host_doubles(c.query);
  lookups(c, mechanism, &e);
  return e;
}

WorkedExample worked_example() {
  WorkedExample x;
  x.query = {1, 0, 1, 0};
  x.keys = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 0, 0, 0}};
  x.values = {10, 20, 30};
  const auto f = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor q = torch::tensor(x.query, f).view({1, 1, 4});
  std::vector<double> flat_keys;
  for (const auto& k : x.keys) flat_keys.insert(flat_keys.end(), k.begin(), k.end());
  const torch::Tensor k = torch::tensor(flat_keys, f).view({1, 3, 4});
  const torch::Tensor v = torch::tensor(x.values, f).view({1, 3, 1});
  // The models' function, twice: without the scale (the raw scores) and with it (what the softmax takes).
  const AttentionOutput raw = scaled_dot_product(q, k, v, torch::Tensor(), /*scale=*/false);
  const AttentionOutput scaled = scaled_dot_product(q, k, v, torch::Tensor(), /*scale=*/true);
  x.scale = 1.0 / std::sqrt(4.0);
  x.lookup.scores = host_doubles(raw.scores);
  x.lookup.scaled = host_doubles(scaled.scores);
  x.lookup.weights = host_doubles(scaled.weights);
  x.lookup.context = host_doubles(scaled.context);
  return x;
}

}  // namespace attnmt
