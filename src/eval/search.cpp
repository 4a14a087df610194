#include "eval/search.h"

#include <cmath>
#include <numeric>

#include "common/host.h"
#include "common/precision.h"
#include "data/special_tokens.h"
#include "kernels/softmax_rows.h"

namespace attnmt {

SearchOptions search_options(const EvalConfig& eval, int beam) {
  SearchOptions so;
  so.beam_size = beam > 0 ? beam : eval.beam_size;
  so.length_penalty = eval.length_penalty;
  so.max_len_ratio = eval.max_len_ratio;
  return so;
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
  torch::Tensor y = torch::full({B}, kBosId, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::Tensor finished = torch::zeros({B}, torch::TensorOptions().dtype(torch::kBool).device(device));
  std::vector<torch::Tensor> tokens, scores, weights;
  for (int64_t t = 0; t < max_steps; ++t) {
    DecoderStepOutput s = model->decoder->step(y, state, mem);
    const RowArgmax pick = argmax_log_softmax(float_if_reduced(model->decoder->logits(s.readout)));  // [B]: log_softmax + max
    // Rows past their <eos> go on with their own picks: the hypotheses are read up to each row's <eos> below, so
    // nothing on the device needs to mask them (two operations a step fewer).
    y = pick.ids;
    tokens.push_back(y);
    scores.push_back(pick.logp);
    if (opt.keep_weights && s.weights.defined()) weights.push_back(s.weights);
    if (!opt.stop_at_eos) continue;
    finished.logical_or_(y.eq(kEosId));
    if (t % 4 == 3 && host_scalar<bool>(finished.all())) break;  // one host read every few steps
  }
  const int64_t steps = static_cast<int64_t>(tokens.size());
  const HostTensor toks = to_host(torch::stack(tokens, 1), torch::kLong);  // [B, steps]
  const HostTensor sc = to_host(torch::stack(scores, 1), torch::kFloat);
  const HostTensor w = weights.empty() ? HostTensor() : to_host(torch::stack(weights, 1), torch::kFloat);  // [B, steps, S]
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
  const std::vector<int64_t> lens = cpu_batch.lengths();
  std::vector<int64_t> limits(static_cast<size_t>(B));
  int64_t max_steps = 0;
  for (int64_t b = 0; b < B; ++b) {
    limits[static_cast<size_t>(b)] = static_cast<int64_t>(std::floor(opt.max_len_ratio * static_cast<double>(lens[static_cast<size_t>(b)]))) + 10;
    max_steps = std::max(max_steps, limits[static_cast<size_t>(b)]);
  }
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  EncoderOutput enc = model->encode(batch.src, batch.src_len, batch.src_mask);
  // Keys are projected once for the B sentences, then each row is repeated for its K beams.
  torch::Tensor expand = torch::arange(B, long_opts).repeat_interleave(K);  // [B*K]
  AttentionMemory mem = model->decoder->prepare(enc).index_select(expand);
  DecoderState state = model->decoder->init_state(enc).index_select(expand);
  state.cache.reserved = max_steps;  // a self-attention decoder's key/value buffers: every step fits

  // Sentences still searching, in the order of their rows: position p holds rows p*K .. p*K+K-1. A finished
  // sentence leaves the batch, so that its rows are not computed again while the others go on.
  std::vector<int64_t> active(static_cast<size_t>(B));
  std::iota(active.begin(), active.end(), 0);
  // Host-side bookkeeping per row: tokens so far, attention rows so far.
  std::vector<std::vector<int64_t>> toks(static_cast<size_t>(B * K));
  std::vector<std::vector<std::vector<float>>> wts(static_cast<size_t>(B * K));
  std::vector<double> scores(static_cast<size_t>(B * K), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 1; k < K; ++k) scores[static_cast<size_t>(b * K + k)] = -std::numeric_limits<double>::infinity();
  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  torch::Tensor y = torch::full({B * K}, kBosId, long_opts);

  for (int64_t t = 0; t < max_steps; ++t) {
    DecoderStepOutput s = model->decoder->step(y, state, mem);
    if (stats) {
      ++stats->steps;
      stats->row_steps += y.size(0);
    }
    torch::Tensor logp = torch::log_softmax(model->decoder->logits(s.readout).to(torch::kFloat), -1);  // [P*K, V]
    const int64_t V = logp.size(1);
    torch::Tensor base = to_device(std::vector<float>(scores.begin(), scores.end()), device).unsqueeze(1);
    const int64_t P = static_cast<int64_t>(active.size());
    torch::Tensor cand = (base + logp).view({P, K * V});
    const int64_t C = std::min<int64_t>(2 * K, K * V);
    auto [top_v, top_i] = cand.topk(C, 1);
    // One read a step: each sentence's candidates (scores, then their row-and-token indices, exact in double below
    // 2^53) and, when asked for, its rows' attention weights, side by side.
    const bool with_weights = opt.keep_weights && s.weights.defined();
    std::vector<torch::Tensor> parts = {top_v, top_i};
    if (with_weights) parts.push_back(s.weights.reshape({P, -1}));  // [P, K * S]
    for (auto& part : parts) part = part.to(torch::kDouble);
    const HostTensor read = to_host(torch::cat(parts, 1), torch::kDouble);
    const int64_t width = read.size(1), S_w = with_weights ? s.weights.size(1) : 0;
    const double* row_read = read.data<double>();
    auto tv = [&](int64_t p, int64_t c) { return row_read[p * width + c]; };
    auto ti = [&](int64_t p, int64_t c) { return static_cast<int64_t>(row_read[p * width + C + c]); };

    std::vector<int64_t> next_rows(static_cast<size_t>(P * K)), next_tok(static_cast<size_t>(P * K));
    std::vector<std::vector<int64_t>> new_toks(static_cast<size_t>(P * K));
    std::vector<std::vector<std::vector<float>>> new_wts(static_cast<size_t>(P * K));
    std::vector<double> new_scores(static_cast<size_t>(P * K), -std::numeric_limits<double>::infinity());
    for (int64_t p = 0; p < P; ++p) {
      const int64_t b = active[static_cast<size_t>(p)];
      const size_t bi = static_cast<size_t>(b);
      int64_t filled = 0;
      {
        const bool at_limit = t + 1 >= limits[bi];
        for (int64_t c = 0; c < C && filled < K; ++c) {
          double sc = tv(p, c);
          if (!std::isfinite(sc)) break;
          int64_t row = p * K + ti(p, c) / V, tok = ti(p, c) % V;
          auto row_weights = [&]() {
            auto w = wts[static_cast<size_t>(row)];
            if (with_weights) {
              const double* at = row_read + p * width + 2 * C + (row - p * K) * S_w;
              w.emplace_back(at, at + lens[bi]);
            }
            return w;
          };
          if (tok == kEosId || at_limit) {
            Hypothesis h;
            h.tokens = toks[static_cast<size_t>(row)];
            if (tok != kEosId) h.tokens.push_back(tok);  // cut at the length limit
            h.logprob = sc;
            h.score = sc / length_penalty(static_cast<int64_t>(toks[static_cast<size_t>(row)].size()) + 1, opt.length_penalty);
            h.weights = row_weights();
            finished[bi].push_back(std::move(h));
            continue;
          }
          size_t dst = static_cast<size_t>(p * K + filled);
          next_rows[dst] = row;
          next_tok[dst] = tok;
          new_toks[dst] = toks[static_cast<size_t>(row)];
          new_toks[dst].push_back(tok);
          new_wts[dst] = row_weights();
          new_scores[dst] = sc;
          ++filled;
        }
        // Stop when nothing unfinished can still beat the best finished hypothesis.
        if (!finished[bi].empty()) {
          double best_done = -std::numeric_limits<double>::infinity();
          for (const auto& h : finished[bi]) best_done = std::max(best_done, h.score);
          double best_open = -std::numeric_limits<double>::infinity();
          const double lp_max = length_penalty(limits[bi] + 1, opt.length_penalty);
          for (int64_t k = 0; k < filled; ++k) {
            double sc = new_scores[static_cast<size_t>(p * K + k)];
            // log-probabilities only fall as a hypothesis grows; the penalty grows with length.
            best_open = std::max(best_open, sc / (sc < 0 ? lp_max : 1.0));
          }
          if (best_done >= best_open && finished[bi].size() >= nbest) done[bi] = true;
        }
        if (at_limit || filled == 0) done[bi] = true;
      }
      for (int64_t k = filled; k < K; ++k) {  // idle rows keep a valid state
        size_t dst = static_cast<size_t>(p * K + k);
        next_rows[dst] = p * K;
        next_tok[dst] = kPadId;
      }
    }
    // Keep the rows of the sentences still searching, in order.
    std::vector<int64_t> still, keep;  // sentences; their positions' rows in this step's layout
    for (int64_t p = 0; p < P; ++p) {
      if (done[static_cast<size_t>(active[static_cast<size_t>(p)])]) continue;
      still.push_back(active[static_cast<size_t>(p)]);
      for (int64_t k = 0; k < K; ++k) keep.push_back(p * K + k);
    }
    if (still.empty()) break;
    toks.clear();
    wts.clear();
    scores.clear();
    std::vector<int64_t> rows_next, tok_next;
    for (int64_t r : keep) {
      toks.push_back(std::move(new_toks[static_cast<size_t>(r)]));
      wts.push_back(std::move(new_wts[static_cast<size_t>(r)]));
      scores.push_back(new_scores[static_cast<size_t>(r)]);
      rows_next.push_back(next_rows[static_cast<size_t>(r)]);
      tok_next.push_back(next_tok[static_cast<size_t>(r)]);
    }
    // The next step's rows and tokens go to the device in copies that do not wait (the step's one wait is the read above).
    if (still.size() != active.size()) mem = mem.index_select(to_device(keep, device));
    active = std::move(still);
    state = state.index_select(to_device(rows_next, device));
    y = to_device(tok_next, device);
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
