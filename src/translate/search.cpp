#include "translate/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>

#include <spdlog/spdlog.h>

#include "common/cuda_graph.h"
#include "common/errors.h"
#include "common/host.h"
#include "common/precision.h"
#include "data/special_tokens.h"
#include "kernels/softmax_rows.h"

namespace attnmt {

SearchOptions search_options(const EvalConfig& eval, int beam, double length_penalty) {
  SearchOptions so;
  so.beam_size = beam > 0 ? beam : eval.beam_size;
  so.length_penalty = length_penalty >= 0 ? length_penalty : eval.length_penalty;
  so.max_len_ratio = eval.max_len_ratio;
  return so;
}

namespace {

// What the steps of a greedy search computed: each row's token and its log-probability per step, and the attention
// weights per step when they are kept.
struct GreedySteps {
  torch::Tensor tokens;  // [B, steps] long
  torch::Tensor scores;  // [B, steps]
  std::vector<torch::Tensor> weights;  // per step [B, S], when kept
};

// The steps one operation at a time. Rows past their <eos> go on with their own picks: the hypotheses are read up
// to each row's <eos> afterwards, so nothing on the device needs to mask them.
GreedySteps eager_steps(Seq2Seq& model, DecoderState state, const AttentionMemory& mem, torch::Tensor y,
                        int64_t max_steps, const SearchOptions& opt) {
  torch::Tensor finished = torch::zeros_like(y, torch::kBool);
  std::vector<torch::Tensor> tokens, scores, weights;
  for (int64_t t = 0; t < max_steps; ++t) {
    if (opt.cancelled && opt.cancelled()) throw SearchCancelled();
    DecoderStepOutput s = model->decoder->step(y, state, mem);
    const RowArgmax pick = argmax_log_softmax(float_if_reduced(model->decoder->logits(s.readout)));  // [B]: log_softmax + max
    y = pick.ids;
    tokens.push_back(y);
    scores.push_back(pick.logp);
    if (opt.keep_weights && s.weights.defined()) weights.push_back(s.weights);
    if (!opt.stop_at_eos) continue;
    finished.logical_or_(y.eq(kEosId));
    if (t % 4 == 3 && host_scalar<bool>(finished.all())) break;  // one host read every few steps
  }
  return {torch::stack(tokens, 1), torch::stack(scores, 1), std::move(weights)};
}

// The same steps with the step recorded once as a CUDA graph and then launched as one unit: the host launches one
// graph a step instead of its twenty-odd operations. What the recorded step reads and writes stays in place: the
// previous token, the recurrent state (and the fed-back attentional vector), the step's column of the results (a
// counter on the device), the finished flags. The first step runs eagerly on the graph's stream (LibTorch's lazy
// set-up happens outside the recording), the second is recorded and launched, and so is every one after it. Should
// the recording fail, the search goes on eagerly from the same buffers, and says so once.
GreedySteps graphed_steps(Seq2Seq& model, const DecoderState& init, const AttentionMemory& mem, const torch::Tensor& y0,
                          int64_t max_steps, const SearchOptions& opt) {
  torch::Tensor y = y0.clone();
  DecoderState state = init;
  state.rnn.h = init.rnn.h.clone();
  if (init.rnn.c.defined()) state.rnn.c = init.rnn.c.clone();
  if (init.feed.defined()) state.feed = init.feed.clone();
  const int64_t B = y.size(0);
  const torch::TensorOptions on = y.options();
  torch::Tensor tokens = torch::zeros({B, max_steps}, on.dtype(torch::kLong));
  torch::Tensor scores = torch::zeros({B, max_steps}, on.dtype(torch::kFloat));
  torch::Tensor column = torch::zeros({1}, on.dtype(torch::kLong));
  torch::Tensor finished = torch::zeros({B}, on.dtype(torch::kBool));
  torch::Tensor all_finished = torch::zeros({}, on.dtype(torch::kBool));
  const auto step = [&] {
    DecoderState s = state;  // the same tensors; step() replaces its members with the new state
    const DecoderStepOutput out = model->decoder->step(y, s, mem);
    const RowArgmax pick = argmax_log_softmax(float_if_reduced(model->decoder->logits(out.readout)));
    y.copy_(pick.ids);
    state.rnn.h.copy_(s.rnn.h);
    if (state.rnn.c.defined()) state.rnn.c.copy_(s.rnn.c);
    if (state.feed.defined()) state.feed.copy_(s.feed);
    tokens.index_copy_(1, column, pick.ids.unsqueeze(1));
    scores.index_copy_(1, column, pick.logp.to(torch::kFloat).unsqueeze(1));
    column.add_(1);
    finished.logical_or_(pick.ids.eq(kEosId));
    all_finished.copy_(finished.all());
  };
  CudaGraph graph;
  bool recorded = false, eager = false;
  int64_t steps = 0;
  while (steps < max_steps) {
    if (opt.cancelled && opt.cancelled()) throw SearchCancelled();
    if (steps == 0) {
      graph.warm_up(step);
    } else if (eager) {
      step();
    } else {
      if (!recorded) {
        try {
          graph.capture(step);
          recorded = true;
        } catch (const std::exception& e) {
          const std::string why = e.what();
          static std::once_flag said;
          std::call_once(said, [&] { spdlog::warn("greedy search: the decoder step could not be recorded as a CUDA graph, "
                                                  "it runs eagerly ({})", first_line(why)); });
          eager = true;
          continue;
        }
      }
      graph.replay();
    }
    ++steps;
    if (opt.stop_at_eos && steps % 4 == 0 && host_scalar<bool>(all_finished)) break;  // one host read every few steps
  }
  return {tokens.narrow(1, 0, steps), scores.narrow(1, 0, steps), {}};
}

}  // namespace

bool greedy_step_graphed(Seq2Seq& model, const SearchOptions& opt, const torch::Device& device) {
  // An RNN decoder's state keeps one shape (a self-attention decoder's key/value cache grows); a map would be one
  // more output per step; bf16 autocast's cache of cast weights must not be recorded.
  return opt.cuda_graph && device.is_cuda() && CudaGraph::available() && !model->decoder->is_self_attention() &&
         !opt.keep_weights && precision() != Precision::kBf16;
}

std::vector<Hypothesis> greedy_search(Seq2Seq& model, const Batch& cpu_batch, const SearchOptions& opt,
                                      const torch::Device& device) {
  torch::NoGradGuard ng;
  const Autocast bf16(device);  // one region for the whole search (each weight cast once), under bf16 only
  const ScopedAttentionMaps maps(opt.keep_weights);
  Batch batch = cpu_batch.to(device);
  const int64_t B = batch.src.size(0);
  std::vector<int64_t> limits(static_cast<size_t>(B));
  int64_t max_steps = 0;
  const std::vector<int64_t> lens = cpu_batch.lengths();
  for (int64_t b = 0; b < B; ++b) {
    limits[static_cast<size_t>(b)] = static_cast<int64_t>(std::floor(opt.max_len_ratio * static_cast<double>(lens[static_cast<size_t>(b)]))) + 10;
    max_steps = std::max(max_steps, limits[static_cast<size_t>(b)]);
  }
  EncoderOutput enc = model->encode(batch.src, batch.src_len, batch.src_mask);
  DecoderState state = model->decoder->init_state(enc);
  state.cache.reserved = max_steps;  // a self-attention decoder's key/value buffers: every step fits
  AttentionMemory mem = model->decoder->prepare(enc);
  const torch::Tensor bos = torch::full({B}, kBosId, torch::TensorOptions().dtype(torch::kLong).device(device));
  const GreedySteps run = greedy_step_graphed(model, opt, device) && max_steps >= 3
                              ? graphed_steps(model, state, mem, bos, max_steps, opt)
                              : eager_steps(model, std::move(state), mem, bos, max_steps, opt);
  const int64_t steps = run.tokens.size(1);
  const HostTensor toks = to_host(run.tokens, torch::kLong);  // [B, steps]
  const HostTensor sc = to_host(run.scores, torch::kFloat);
  const HostTensor w = run.weights.empty() ? HostTensor() : to_host(torch::stack(run.weights, 1), torch::kFloat);  // [B, steps, S]
  const int64_t S = w.defined() ? w.size(2) : 0;
  std::vector<Hypothesis> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    Hypothesis& h = out[static_cast<size_t>(b)];
    int64_t limit = limits[static_cast<size_t>(b)];
    for (int64_t t = 0; t < steps && t < limit; ++t) {
      int64_t id = toks.data<int64_t>()[b * steps + t];
      const float lp = sc.data<float>()[b * steps + t];
      h.score += lp;
      h.logprob += lp;
      if (w.defined()) {
        const int64_t at = (b * steps + t) * S;
        h.weights.push_back(w.values<float>(at, at + lens[static_cast<size_t>(b)]));
      }
      if (id == kEosId) break;
      h.tokens.push_back(id);
    }
  }
  return out;
}

}  // namespace attnmt

namespace attnmt {

double length_penalty(int64_t len, double alpha) {
  if (alpha == 0) return 1.0;
  return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One beam step, chosen on the device. The next rows of each sentence are its K best candidates (a row of the beam
// and a token) that do not end with <eos>; their scores, rows and tokens stay on the device for the next step. Every
// row's <eos> candidate is read with them, and the host ends the hypotheses of those that rank above the K-th row
// going on: the same hypotheses as ranking the 2K best candidates, <eos> or not, and taking them in order.
struct BeamChoice {
  torch::Tensor scores;  // [P*K] float: each next row's log-probability so far, best first per sentence (-inf: idle)
  torch::Tensor rows;    // [P*K] long: the row it extends (in this step's layout)
  torch::Tensor tokens;  // [P*K] long: the token it adds
  torch::Tensor read;    // [P, 3K (+ K*S)] double: the layout BeamRead reads
};

// scores [P*K], logp [P*K, V], first_row [P, 1] (p*K); weights [P*K, S] or undefined.
BeamChoice choose_on_device(const torch::Tensor& scores, const torch::Tensor& logp, const torch::Tensor& first_row,
                            int64_t K, const torch::Tensor& weights) {
  const int64_t P = first_row.size(0), V = logp.size(1);
  torch::Tensor cand = scores.unsqueeze(1) + logp;                         // [P*K, V]
  const torch::Tensor eos = scores + logp.select(1, kEosId);               // [P*K]: each row ended now
  cand.select(1, kEosId).fill_(kNegInf);
  auto [top_v, top_i] = cand.view({P, K * V}).topk(K, 1);                  // [P, K]: rows going on, best first
  BeamChoice out;
  out.scores = top_v.view(-1);
  out.rows = top_i.div(V, /*rounding_mode=*/"floor").add_(first_row).view(-1);
  out.tokens = top_i.remainder(V).view(-1);
  std::vector<torch::Tensor> parts = {top_v, top_i, eos.view({P, K})};
  if (weights.defined()) parts.push_back(weights.reshape({P, -1}));       // [P, K * S]
  for (auto& part : parts) part = part.to(torch::kDouble);                 // ids are exact in double below 2^53
  out.read = torch::cat(parts, 1);
  return out;
}

// The host's view of a step, per sentence p: its rows going on (score, row-and-token id), its rows' <eos> scores and,
// when asked for, its rows' attention weights.
struct BeamRead {
  HostTensor values;
  int64_t K = 0, V = 0, S = 0;
  double at(int64_t p, int64_t column) const { return values.data<double>()[p * values.size(1) + column]; }
  double score(int64_t p, int64_t k) const { return at(p, k); }
  int64_t row(int64_t p, int64_t k) const { return p * K + static_cast<int64_t>(at(p, K + k)) / V; }
  int64_t token(int64_t p, int64_t k) const { return static_cast<int64_t>(at(p, K + k)) % V; }
  double eos_score(int64_t p, int64_t k) const { return at(p, 2 * K + k); }  // row p*K+k followed by <eos>
  // Row r's attention weights over the first len source positions (r in sentence p's rows).
  std::vector<float> weights(int64_t p, int64_t r, int64_t len) const {
    const double* w = values.data<double>() + p * values.size(1) + 3 * K + (r - p * K) * S;
    return std::vector<float>(w, w + len);
  }
};

// What the host keeps per row of the beam: its tokens and attention rows, for the hypotheses it may end in.
struct BeamHistory {
  std::vector<int64_t> tokens;
  std::vector<std::vector<float>> weights;
};

// A hypothesis ending this step: row r followed by token (or cut after it at the length limit), with its score.
struct Ending {
  double score;
  int64_t row, token;
};

// The hypotheses sentence p ends this step (best first) and the histories of its rows going on, from the step's
// read. At its length limit every candidate ends. Returns how many of its rows go on.
int64_t record_sentence(const BeamRead& r, int64_t p, int64_t src_len, bool at_limit, double alpha,
                        const std::vector<BeamHistory>& rows, std::vector<BeamHistory>& next,
                        std::vector<double>& next_scores, std::vector<Hypothesis>& ended) {
  auto extend = [&](int64_t row) {
    BeamHistory h = rows[static_cast<size_t>(row)];
    if (r.S > 0) h.weights.push_back(r.weights(p, row, src_len));
    return h;
  };
  const double kth = r.score(p, r.K - 1);  // the worst row going on
  std::vector<Ending> ends;
  for (int64_t k = 0; k < r.K; ++k) {
    const double e = r.eos_score(p, k);
    if (std::isfinite(e) && (at_limit || e > kth)) ends.push_back({e, p * r.K + k, kEosId});
  }
  int64_t open = 0;
  for (; open < r.K && std::isfinite(r.score(p, open)); ++open) {
    if (at_limit) {
      ends.push_back({r.score(p, open), r.row(p, open), r.token(p, open)});
      continue;
    }
    const size_t dst = static_cast<size_t>(p * r.K + open);
    next[dst] = extend(r.row(p, open));
    next[dst].tokens.push_back(r.token(p, open));
    next_scores[dst] = r.score(p, open);
  }
  std::stable_sort(ends.begin(), ends.end(), [](const Ending& a, const Ending& b) { return a.score > b.score; });
  for (const Ending& e : ends) {
    BeamHistory h = extend(e.row);
    Hypothesis hyp;
    hyp.tokens = std::move(h.tokens);
    if (e.token != kEosId) hyp.tokens.push_back(e.token);  // cut at the length limit
    hyp.logprob = e.score;
    hyp.score = e.score / length_penalty(static_cast<int64_t>(rows[static_cast<size_t>(e.row)].tokens.size()) + 1, alpha);
    hyp.weights = std::move(h.weights);
    ended.push_back(std::move(hyp));
  }
  return at_limit ? 0 : open;
}

// Whether a sentence is done: with no row going on (at its length limit, none does), or when nothing unfinished can
// still beat its best finished hypothesis (log-probabilities only fall as a hypothesis grows; the penalty grows with
// length).
bool sentence_done(const std::vector<Hypothesis>& ended, const double* open_scores, int64_t open, int64_t limit,
                   size_t nbest, double alpha) {
  if (open == 0) return true;
  if (ended.size() < nbest) return false;
  double best_done = kNegInf, best_open = kNegInf;
  for (const auto& h : ended) best_done = std::max(best_done, h.score);
  const double lp_max = length_penalty(limit + 1, alpha);
  for (int64_t k = 0; k < open; ++k) best_open = std::max(best_open, open_scores[k] / (open_scores[k] < 0 ? lp_max : 1.0));
  return best_done >= best_open;
}

}  // namespace

std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const Batch& cpu_batch, const SearchOptions& opt,
                                                 const torch::Device& device, SearchStats* stats) {
  torch::NoGradGuard ng;
  const Autocast bf16(device);
  const ScopedAttentionMaps maps(opt.keep_weights);
  TORCH_CHECK(opt.beam_size >= 1, "beam_search: beam_size must be >= 1");
  const int64_t K = opt.beam_size;
  const size_t nbest = static_cast<size_t>(std::max(1, std::min(opt.nbest, opt.beam_size)));
  Batch batch = cpu_batch.to(device);
  const int64_t B = batch.src.size(0);
  if (B == 0) return {};
  const std::vector<int64_t> lens = cpu_batch.lengths();
  std::vector<int64_t> limits(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    limits[static_cast<size_t>(b)] = static_cast<int64_t>(std::floor(opt.max_len_ratio * static_cast<double>(lens[static_cast<size_t>(b)]))) + 10;
  const int64_t max_steps = *std::max_element(limits.begin(), limits.end());
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  EncoderOutput enc = model->encode(batch.src, batch.src_len, batch.src_mask);
  // Keys are projected once for the B sentences, then each row is repeated for its K beams.
  torch::Tensor expand = torch::arange(B, long_opts).repeat_interleave(K);  // [B*K]
  AttentionMemory mem = model->decoder->prepare(enc).index_select(expand);
  DecoderState state = model->decoder->init_state(enc).index_select(expand);
  state.cache.reserved = max_steps;  // a self-attention decoder's key/value buffers: every step fits

  // Sentences still searching, in the order of their rows: position p holds rows p*K .. p*K+K-1. A finished
  // sentence leaves the batch, so that its rows are not computed again while the others go on. The device holds
  // what the next step needs (scores, rows, tokens); the host keeps the histories, from one read a step.
  std::vector<int64_t> active(static_cast<size_t>(B));
  std::iota(active.begin(), active.end(), 0);
  std::vector<BeamHistory> rows(static_cast<size_t>(B * K));
  torch::Tensor scores = torch::full({B, K}, kNegInf, torch::TensorOptions().dtype(torch::kFloat).device(device));
  scores.select(1, 0).zero_();
  scores = scores.view(-1);
  torch::Tensor first_row = (torch::arange(B, long_opts) * K).unsqueeze(1);  // [P, 1]
  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(B));
  torch::Tensor y = torch::full({B * K}, kBosId, long_opts);

  for (int64_t t = 0; t < max_steps; ++t) {
    if (opt.cancelled && opt.cancelled()) throw SearchCancelled();
    DecoderStepOutput s = model->decoder->step(y, state, mem);
    if (stats) {
      ++stats->steps;
      stats->row_steps += y.size(0);
    }
    torch::Tensor logp = torch::log_softmax(model->decoder->logits(s.readout).to(torch::kFloat), -1);  // [P*K, V]
    const bool with_weights = opt.keep_weights && s.weights.defined();
    const BeamChoice choice = choose_on_device(scores, logp, first_row, K, with_weights ? s.weights : torch::Tensor());
    const BeamRead read{to_host(choice.read, torch::kDouble), K, logp.size(1), with_weights ? s.weights.size(1) : 0};  // the step's one wait

    const int64_t P = static_cast<int64_t>(active.size());
    std::vector<BeamHistory> next(static_cast<size_t>(P * K));
    std::vector<double> next_scores(static_cast<size_t>(P * K), kNegInf);
    std::vector<int64_t> still;  // positions of the sentences still searching
    for (int64_t p = 0; p < P; ++p) {
      const size_t b = static_cast<size_t>(active[static_cast<size_t>(p)]);
      const int64_t open = record_sentence(read, p, lens[b], t + 1 >= limits[b], opt.length_penalty, rows, next, next_scores,
                                           finished[b]);
      if (!sentence_done(finished[b], next_scores.data() + p * K, open, limits[b], nbest, opt.length_penalty)) still.push_back(p);
    }
    if (still.empty()) break;
    torch::Tensor next_rows = choice.rows, next_tokens = choice.tokens;
    scores = choice.scores;
    if (static_cast<int64_t>(still.size()) != P) {  // sentences leave: one copy of their positions to the device
      const torch::Tensor keep = (to_device(still, device).unsqueeze(1) * K + torch::arange(K, long_opts)).view(-1);
      mem = mem.index_select(keep);
      next_rows = next_rows.index_select(0, keep);
      next_tokens = next_tokens.index_select(0, keep);
      scores = scores.index_select(0, keep);
      first_row = first_row.narrow(0, 0, static_cast<int64_t>(still.size()));
    }
    rows.clear();
    std::vector<int64_t> now_active;
    for (int64_t p : still) {
      now_active.push_back(active[static_cast<size_t>(p)]);
      for (int64_t k = 0; k < K; ++k) rows.push_back(std::move(next[static_cast<size_t>(p * K + k)]));
    }
    active = std::move(now_active);
    state = state.index_select(next_rows);
    y = next_tokens;
  }
  std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto& f = finished[static_cast<size_t>(b)];
    std::stable_sort(f.begin(), f.end(), [](const Hypothesis& a, const Hypothesis& c) { return a.score > c.score; });
    if (f.size() > nbest) f.resize(nbest);
    out[static_cast<size_t>(b)] = std::move(f);
  }
  return out;
}

}  // namespace attnmt
