#include "translate/translator.h"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "common/host.h"
#include "common/progress.h"
#include "data/batcher.h"
#include "model/loss.h"
#include "translate/alignment.h"

namespace attnmt {

std::vector<std::vector<float>> token_weights(const Translation& t) {
  const size_t n = std::min(t.weights.size(), t.tgt_tokens.size());
  return {t.weights.begin(), t.weights.begin() + static_cast<std::ptrdiff_t>(n)};
}

WordLevel word_level(const Tokenizer& tok, const std::vector<std::string>& src_tokens,
                     const std::vector<std::string>& tgt_tokens, const std::vector<std::vector<float>>& weights) {
  if (!tok.subword()) return {src_tokens, tgt_tokens, weights};
  WordLevel w{tok.join_words(src_tokens), tok.join_words(tgt_tokens), {}};
  if (!weights.empty()) w.weights = word_level_map(weights, tok.word_index(src_tokens), tok.word_index(tgt_tokens));
  return w;
}

Alignment alignment_of(const Translation& t, double threshold) { return hard_alignment(token_weights(t), threshold); }

Translator::Translator(LoadedRun& run, SearchOptions opt, int batch_size)
    : run_(run), opt_(std::move(opt)), batch_size_(batch_size > 0 ? batch_size : run.cfg.eval.batch_size) {}

Translation word_level(const Tokenizer& tok, const Translation& t) {
  if (!tok.subword()) return t;
  Translation w = t;
  WordLevel wl = word_level(tok, t.src_tokens, t.tgt_tokens, t.weights);
  w.src_tokens = std::move(wl.src);
  w.tgt_tokens = std::move(wl.tgt);
  w.weights = std::move(wl.weights);
  return w;
}

std::vector<Translation> Translator::best(const std::vector<std::string>& lines) const {
  Translator one = *this;
  one.opt_.nbest = 1;
  std::vector<Translation> out;
  out.reserve(lines.size());
  for (auto& ts : one.nbest(lines)) out.push_back(std::move(ts[0]));
  return out;
}

std::vector<std::vector<std::string>> Translator::tokenize(const std::vector<std::string>& lines) const {
  std::vector<std::vector<std::string>> out;
  out.reserve(lines.size());
  for (const auto& l : lines) out.push_back(run_.tok.encode(l, Side::kSource));
  return out;
}

std::vector<std::vector<Translation>> Translator::nbest(const std::vector<std::string>& lines) const {
  return nbest_tokens(tokenize(lines));
}

std::vector<std::vector<Translation>> Translator::nbest_tokens(const std::vector<std::vector<std::string>>& src_tokens) const {
  const size_t n_lines = src_tokens.size();
  std::vector<std::vector<Translation>> out(n_lines, std::vector<Translation>(1));
  std::vector<std::vector<int64_t>> ids(n_lines);
  std::vector<int64_t> order;
  for (size_t i = 0; i < n_lines; ++i) {
    out[i][0].src_tokens = src_tokens[i];
    if (out[i][0].src_tokens.empty()) continue;
    if (static_cast<int>(out[i][0].src_tokens.size()) > run_.cfg.data.max_len)
      spdlog::warn("line {}: {} tokens, longer than the training limit of {}; translating anyway", i + 1,
                   out[i][0].src_tokens.size(), run_.cfg.data.max_len);
    ids[i] = run_.src_vocab.encode(out[i][0].src_tokens);
    order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ids[static_cast<size_t>(a)].size() < ids[static_cast<size_t>(b)].size();
  });
  ProgressLine progress("translating", static_cast<int64_t>(order.size()));
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size_)) {
    progress.update(static_cast<int64_t>(start));
    std::vector<int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(start),
                             order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + static_cast<size_t>(batch_size_))));
    Batch b = make_src_batch(ids, idx);
    std::vector<std::vector<Hypothesis>> hs;
    if (opt_.beam_size <= 1) {  // greedy
      for (auto& h : greedy_search(run_.model, b, opt_, run_.device)) hs.push_back({std::move(h)});
    } else {
      hs = beam_search(run_.model, b, opt_, run_.device);
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      std::vector<Translation>& ts = out[static_cast<size_t>(idx[k])];
      const std::vector<std::string> src_tokens = ts[0].src_tokens;
      if (hs[k].empty()) continue;  // nothing finished: one empty translation
      ts.assign(hs[k].size(), Translation{});
      for (size_t n = 0; n < hs[k].size(); ++n) {
        Translation& t = ts[n];
        t.src_tokens = src_tokens;
        t.tgt_tokens = run_.tgt_vocab.decode(hs[k][n].tokens);
        t.text = run_.tok.decode(t.tgt_tokens, Side::kTarget);
        t.weights = std::move(hs[k][n].weights);
        t.score = hs[k][n].score;
        t.logprob = hs[k][n].logprob;
      }
    }
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> forced_attention(LoadedRun& run, const std::vector<std::vector<std::string>>& src,
                                                              const std::vector<std::vector<std::string>>& tgt,
                                                              std::vector<torch::Tensor>* head_weights, double* ppl,
                                                              std::vector<SelfAttentionMaps>* self_maps) {
  TORCH_CHECK(src.size() == tgt.size(), "forced_attention: ", src.size(), " sources vs ", tgt.size(), " targets");
  torch::NoGradGuard ng;
  std::vector<std::vector<std::vector<float>>> out(src.size());
  if (head_weights) head_weights->assign(src.size(), torch::Tensor());
  if (self_maps) self_maps->assign(src.size(), SelfAttentionMaps());
  std::vector<EncodedPair> data(src.size());
  std::vector<int64_t> order;
  for (size_t i = 0; i < src.size(); ++i) {
    data[i] = {run.src_vocab.encode(src[i]), run.tgt_vocab.encode(tgt[i])};
    if (!src[i].empty()) order.push_back(static_cast<int64_t>(i));
  }
  double loss = 0;
  int64_t tokens = 0;
  const size_t bs = static_cast<size_t>(run.cfg.eval.batch_size);
  ProgressLine progress("forcing references", static_cast<int64_t>(order.size()));
  for (size_t start = 0; start < order.size(); start += bs) {
    progress.update(static_cast<int64_t>(start));
    std::vector<int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(start),
                             order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + bs)));
    Batch b = make_batch(data, idx);
    Batch d = b.to(run.device);
    const BatchLoss bl = batch_loss(run.model, d, 0.0);
    const Seq2SeqOutput& o = bl.out;
    loss += host_scalar<double>(bl.sum);
    tokens += b.tgt_tokens;
    if (self_maps) {
      for (size_t k = 0; k < idx.size(); ++k) {
        const size_t i = static_cast<size_t>(idx[k]);
        const int64_t S = static_cast<int64_t>(src[i].size()), T = static_cast<int64_t>(tgt[i].size());
        for (const auto& w : o.encoder_self_weights)
          (*self_maps)[i].encoder.push_back(to_host(w[static_cast<int64_t>(k)].slice(1, 0, S).slice(2, 0, S), torch::kFloat).tensor());
        for (const auto& w : o.decoder_self_weights)
          (*self_maps)[i].decoder.push_back(
              to_host(w[static_cast<int64_t>(k)].slice(1, 0, T + 1).slice(2, 0, T + 1), torch::kFloat).tensor());  // <eos> step too
      }
    }
    if (!o.weights.defined()) continue;
    const HostTensor w = to_host(o.weights, torch::kFloat);  // [B, T, S]
    torch::Tensor hw = o.head_weights.defined() ? to_host(o.head_weights, torch::kFloat).tensor() : torch::Tensor();
    for (size_t k = 0; k < idx.size(); ++k) {
      size_t i = static_cast<size_t>(idx[k]);
      int64_t T = static_cast<int64_t>(tgt[i].size()), S = static_cast<int64_t>(src[i].size());
      for (int64_t j = 0; j < T; ++j) {
        const int64_t at = (static_cast<int64_t>(k) * w.size(1) + j) * w.size(2);
        out[i].push_back(w.values<float>(at, at + S));
      }
      if (head_weights && hw.defined())
        (*head_weights)[i] = hw[static_cast<int64_t>(k)].slice(1, 0, T).slice(2, 0, S).clone();  // [h, T, S]
    }
  }
  if (ppl) *ppl = tokens ? std::exp(std::min(100.0, loss / static_cast<double>(tokens))) : 0.0;
  return out;
}

}  // namespace attnmt
