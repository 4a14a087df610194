#include "eval/search.h"

#include <cmath>

#include "data/vocab.h"

namespace attnmt {

std::vector<Hypothesis> greedy_search(Seq2Seq& model, const Batch& cpu_batch, const SearchOptions& opt,
                                      const torch::Device& device) {
  torch::NoGradGuard ng;
  Batch batch = cpu_batch.to(device);
  const int64_t B = batch.src.size(0);
  std::vector<int64_t> limits(static_cast<size_t>(B));
  int64_t max_steps = 0;
  auto lens = batch.src_len.accessor<int64_t, 1>();
  for (int64_t b = 0; b < B; ++b) {
    limits[static_cast<size_t>(b)] = static_cast<int64_t>(std::floor(opt.max_len_ratio * static_cast<double>(lens[b]))) + 10;
    max_steps = std::max(max_steps, limits[static_cast<size_t>(b)]);
  }
  EncoderOutput enc = model->encode(batch.src, batch.src_len, batch.src_mask);
  DecoderState state = model->decoder->init_state(enc);
  AttentionMemory mem = model->decoder->prepare(enc);
  torch::Tensor y = torch::full({B}, Vocab::kBos, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::Tensor finished = torch::zeros({B}, torch::TensorOptions().dtype(torch::kBool).device(device));
  std::vector<torch::Tensor> tokens, scores, weights;
  for (int64_t t = 0; t < max_steps; ++t) {
    DecoderStepOutput s = model->decoder->step(y, state, mem);
    torch::Tensor logp = torch::log_softmax(model->decoder->logits(s.readout), -1);  // [B, V]
    auto [best, arg] = logp.max(-1);
    y = arg.masked_fill(finished, Vocab::kPad);
    tokens.push_back(y);
    scores.push_back(best.masked_fill(finished, 0.0));
    if (opt.keep_weights && s.weights.defined()) weights.push_back(s.weights);
    finished = finished.logical_or(y.eq(Vocab::kEos));
    if (t % 4 == 3 && finished.all().item<bool>()) break;  // one host sync every few steps
  }
  torch::Tensor toks = torch::stack(tokens, 1).to(torch::kCPU);  // [B, steps]
  torch::Tensor sc = torch::stack(scores, 1).to(torch::kCPU);
  torch::Tensor w = weights.empty() ? torch::Tensor() : torch::stack(weights, 1).to(torch::kCPU);  // [B, steps, S]
  auto ta = toks.accessor<int64_t, 2>();
  auto sa = sc.accessor<float, 2>();
  std::vector<Hypothesis> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    Hypothesis& h = out[static_cast<size_t>(b)];
    int64_t limit = limits[static_cast<size_t>(b)];
    for (int64_t t = 0; t < toks.size(1) && t < limit; ++t) {
      int64_t id = ta[b][t];
      h.score += sa[b][t];
      if (w.defined()) {
        auto row = w[b][t].slice(0, 0, lens[b]).contiguous();
        h.weights.emplace_back(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
      }
      if (id == Vocab::kEos) break;
      h.tokens.push_back(id);
    }
  }
  return out;
}

}  // namespace attnmt
