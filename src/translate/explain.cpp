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

// The position to explain (0-based) among `positions` of tokens (a translation's steps: its tokens and the <eos> step;
// a source: its tokens). what: "the translation", "the source".
int64_t chosen_position(const std::vector<std::string>& tokens, int64_t positions, const ExplainOptions& opt, const std::string& what) {
  if (!opt.word.empty()) {
    const auto it = std::find(tokens.begin(), tokens.end(), opt.word);
    if (it == tokens.end()) throw UsageError("explain: " + what + " has no word '" + opt.word + "'");
    return it - tokens.begin();
  }
  const int64_t step = opt.step == 0 ? 1 : opt.step;
  if (step < 1 || step > positions)
    throw UsageError("explain: --step must be between 1 and " + std::to_string(positions) + " (" + what + " has " +
                     std::to_string(tokens.size()) + " tokens" + (positions > static_cast<int64_t>(tokens.size()) ? ", and one more step ends it" : "") +
                     "), got " + std::to_string(step));
  return step - 1;
}

// The heads of an observed call: its scores, weights and the weighted sums of its values, in double.
// row: the query position within the call (0 for one RNN step).
void lookups(const ObservedCall& c, AttentionImpl* mechanism, int64_t row, StepExplanation* e) {
  const bool multi = c.out.head_weights.defined();
  const int64_t H = multi ? c.out.head_weights.size(1) : 1;
  e->scale = mechanism->score_scale();
  std::vector<torch::Tensor> head_contexts;
  for (int64_t h = 0; h < H; ++h) {
    HeadLookup l;
    const torch::Tensor w = multi ? c.out.head_weights[0][h][row] : c.out.weights[0][row];  // [S]
    const torch::Tensor sc = multi ? c.out.scores[0][h][row] : c.out.scores[0][row];
    const torch::Tensor values = multi ? c.mem.values[0][h] : c.mem.values[0];  // [S, V]
    l.weights = host_doubles(w);
    l.scaled = host_doubles(sc);
    // The forward pass keeps the scores as the softmax takes them (scaled, for scaled dot-product).
    for (double s : l.scaled) l.scores.push_back(e->scale != 0 ? s / e->scale : s);
    l.context = weighted_sum(l.weights, values);
    if (multi && c.out.head_weights.size(2) > 1) {  // a whole pass: every query position's row
      const torch::Tensor all = c.out.head_weights[0][h];  // [T, S]
      for (int64_t t = 0; t < all.size(0); ++t) l.map.push_back(host_doubles(all[t]));
    }
    head_contexts.push_back(torch::tensor(l.context, torch::kDouble));
    e->heads.push_back(std::move(l));
  }
  std::vector<double> formed;
  {  // several heads: W_o [c_1; ...; c_h], the heads' sums joined and projected back
    torch::NoGradGuard ng;
    const torch::Tensor joined = torch::stack(head_contexts).to(c.out.context.scalar_type()).to(c.out.context.device());
    formed = host_doubles(mechanism->join_heads(joined.view({1, H, 1, -1})));
  }
  e->context = host_doubles(c.out.context[0][row]);
  e->query = host_doubles(c.query[0][row]);
  e->masked.assign(e->heads[0].weights.size(), false);
  if (c.mem.mask.defined() && c.mem.mask.dim() == 3) {  // a self-attention decoder's own mask [B, T, S]
    const std::vector<double> visible = host_doubles(c.mem.mask[0][row]);
    for (size_t j = 0; j < visible.size() && j < e->masked.size(); ++j) e->masked[j] = visible[j] == 0;
  }
  e->context_check = largest_difference(e->context, formed);
}


// The RNN decoder's attention at one step: the decoder forced along its own translation up to the step, as the
// search ran it, one step at a time.
void explain_rnn_step(LoadedRun& run, int64_t step, StepExplanation& e) {
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
    return;
  }
  const ObservedCall& c = observer.call();
  TORCH_CHECK(c.out.weights.defined() || c.out.head_weights.defined(), "explain: the attention step was not observed");
  lookups(c, mechanism, 0, &e);
}

// The multi-head attention of a self-attention stack's layer that opt names (the encoder's or the decoder's own, or a
// self-attention decoder's cross-attention); sets e.layer and e.layers.
AttentionImpl* stack_attention(Seq2Seq& model, const ExplainOptions& opt, StepExplanation& e) {
  const bool encoder = opt.part == "encoder";
  if (encoder ? !model->encoder->is_self_attention() : !model->decoder->is_self_attention())
    throw UsageError(std::string("explain: --part ") + opt.part + " needs a self-attention " + (encoder ? "encoder" : "decoder") +
                     " (model." + (encoder ? "encoder" : "decoder") + ".type self_attention); this run's is recurrent");
  e.layers = encoder ? static_cast<int64_t>(model->encoder->self_attention_stack()->layers().size())
                     : static_cast<int64_t>(model->decoder->self_attention_stack()->layers().size());
  e.layer = opt.layer == 0 ? e.layers : opt.layer;
  if (e.layer < 1 || e.layer > e.layers)
    throw UsageError("explain: --layer must be between 1 and " + std::to_string(e.layers) + ", got " + std::to_string(opt.layer));
  const size_t l = static_cast<size_t>(e.layer - 1);
  if (encoder) return model->encoder->self_attention_stack()->layers()[l]->self_attn.get();
  const DecoderLayer& layer = model->decoder->self_attention_stack()->layers()[l];
  return opt.part == "decoder" ? layer->self_attn.get() : layer->cross_attn.get();
}

// A self-attention stack's attention at one position: the model run once over the source and <bos> + its translation
// (teacher-forced, as training runs it; incremental decoding computes the same rows), the layer's call observed.
void explain_stack_position(LoadedRun& run, const ExplainOptions& opt, int64_t row, StepExplanation& e) {
  Seq2Seq& model = run.model;
  AttentionImpl* mechanism = stack_attention(model, opt, e);
  std::vector<int64_t> tgt_in = {kBosId};
  for (int64_t id : run.tgt_vocab.encode(e.target)) tgt_in.push_back(id);
  const Batch batch = make_src_batch({run.src_vocab.encode(e.source)}, {0}).to(run.device);
  const torch::Tensor tgt = torch::tensor(tgt_in, torch::kLong).unsqueeze(0).to(run.device);
  const StepObserver observer(mechanism, 0);
  model->forward(batch.src, batch.src_len, batch.src_mask, tgt);
  const ObservedCall& c = observer.call();
  TORCH_CHECK(c.out.head_weights.defined(), "explain: the layer's attention was not observed");
  lookups(c, mechanism, row, &e);
}

// The lesson's words for a self-attention stack's own attention (the cross-attention's are its type's).
void describe_self_attention(const std::string& part, StepExplanation* e) {
  const bool decoder = part == "decoder";
  e->mechanism = decoder ? "decoder self-attention (causal)" : "encoder self-attention";
  e->score_formula = "score(x_t, x_j) = (W_q x_t) . (W_k x_j) per head, scaled by 1/sqrt(d): queries, keys and values from "
                     "one sequence";
  e->scale_reason = "scaled by 1/sqrt(d): a dot product of d terms grows like sqrt(d); unscaled, large scores would make "
                    "the softmax nearly one-hot, where its gradients vanish";
  e->query_is = decoder ? "x_t, target position t after the layer norm; it sees positions <= t only (the causal mask)"
                        : "x_t, source position t after the layer norm; it sees every source position";
}

}  // namespace

StepExplanation explain_step(LoadedRun& run, const std::string& sentence, const ExplainOptions& opt) {
  if (opt.part != "cross" && opt.part != "encoder" && opt.part != "decoder")
    throw UsageError("explain: --part must be cross, encoder or decoder, got '" + opt.part + "'");
  const bool stack = opt.part != "cross" || run.model->decoder->is_self_attention();
  if (!stack && opt.layer > 1)
    throw UsageError("explain: --layer applies to self-attention stacks; this run's decoder has one attention");
  StepExplanation e;
  e.part = opt.part;
  const AttentionConfig& a = run.cfg.model.attention;
  e.mechanism = attention_traits(a).label;
  describe(a, &e);
  if (opt.part != "cross") describe_self_attention(opt.part, &e);
  const Translator translator(run, search_options(run.cfg.eval, opt.beam));
  const std::vector<std::vector<std::string>> src = translator.tokenize({sentence});
  if (src.at(0).empty()) throw UsageError("explain: --src is empty");
  const Translation t = translator.nbest_tokens(src).at(0).at(0);
  e.source = t.src_tokens;
  e.target = t.tgt_tokens;
  const bool over_source = opt.part == "encoder";
  const int64_t pos = over_source ? chosen_position(e.source, static_cast<int64_t>(e.source.size()), opt, "the source")
                                  : chosen_position(e.target, static_cast<int64_t>(e.target.size()) + 1, opt, "the translation");
  e.step = pos + 1;
  e.produced = over_source ? "" : pos < static_cast<int64_t>(e.target.size()) ? e.target[static_cast<size_t>(pos)] : "<eos>";
  if (opt.part == "decoder") {
    e.keys = {"<bos>"};
    e.keys.insert(e.keys.end(), e.target.begin(), e.target.end());
  } else {
    e.keys = e.source;
  }
  if (stack) {  // the rows of the layer's map: the query positions
    if (opt.part == "encoder") e.rows = e.source;
    else if (opt.part == "decoder") e.rows = e.keys;
    else {
      e.rows = e.target;
      e.rows.push_back("<eos>");
    }
  }
  if (over_source) e.query_token = e.source[static_cast<size_t>(pos)];
  if (opt.part == "decoder") e.query_token = e.keys[static_cast<size_t>(pos)];

  torch::NoGradGuard ng;
  const ScopedAttentionMaps maps(true);
  if (stack) explain_stack_position(run, opt, pos, e);
  else explain_rnn_step(run, pos, e);
  return e;
}

nlohmann::json explanation_json(const StepExplanation& e) {
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : e.heads)
    heads.push_back({{"scores", h.scores}, {"scaled", h.scaled}, {"weights", h.weights}, {"context", h.context}, {"map", h.map}});
  return {{"mechanism", e.mechanism}, {"score", e.score_formula}, {"query_is", e.query_is}, {"scaling", e.scale_reason},
          {"source", e.source},       {"target", e.target},      {"part", e.part},         {"layer", e.layer},
          {"layers", e.layers},       {"keys", e.keys},          {"masked", e.masked},     {"query_token", e.query_token}, {"rows", e.rows},
          {"step", e.step},           {"produced", e.produced},  {"query", e.query},       {"scale", e.scale},
          {"heads", heads},           {"context", e.context},    {"context_check", e.context_check}};
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
