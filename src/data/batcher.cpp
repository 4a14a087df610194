#include "data/batcher.h"

#include "common/host.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "data/special_tokens.h"

namespace attnmt {

std::vector<std::vector<int64_t>> make_batch_plan(const std::vector<EncodedPair>& data, int batch_size, uint64_t seed,
                                                  int64_t epoch, bool shuffle, int pool_batches, int64_t batch_tokens) {
  std::vector<int64_t> order(data.size());
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) deterministic_shuffle(order, mix_seed(seed, static_cast<uint64_t>(epoch) * 2 + 1));
  // With token batches, a pool holds about pool_batches batches of sentences of the mean target length.
  size_t per_batch = static_cast<size_t>(std::max(1, batch_size));
  if (batch_tokens > 0 && !data.empty()) {
    size_t tokens = 0;
    for (const auto& e : data) tokens += e.tgt.size() + 1;
    const size_t mean = std::max<size_t>(1, tokens / data.size());
    per_batch = std::max<size_t>(1, static_cast<size_t>(batch_tokens) / mean);
  }
  const size_t pool = per_batch * static_cast<size_t>(std::max(1, pool_batches));
  auto by_len = [&](int64_t a, int64_t b) {
    const auto& x = data[static_cast<size_t>(a)];
    const auto& y = data[static_cast<size_t>(b)];
    if (x.src.size() != y.src.size()) return x.src.size() < y.src.size();
    if (x.tgt.size() != y.tgt.size()) return x.tgt.size() < y.tgt.size();
    return a < b;
  };
  std::vector<std::vector<int64_t>> plan;
  for (size_t start = 0; start < order.size(); start += pool) {
    size_t end = std::min(order.size(), start + pool);
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(start), order.begin() + static_cast<std::ptrdiff_t>(end), by_len);
    if (batch_tokens > 0) {
      std::vector<int64_t> batch;
      size_t longest = 0;
      for (size_t k = start; k < end; ++k) {
        const size_t len = data[static_cast<size_t>(order[k])].tgt.size() + 1;
        const size_t next_longest = std::max(longest, len);
        if (!batch.empty() && (batch.size() + 1) * next_longest > static_cast<size_t>(batch_tokens)) {
          plan.push_back(std::move(batch));
          batch.clear();
          longest = 0;
        }
        batch.push_back(order[k]);
        longest = std::max(longest, len);
      }
      if (!batch.empty()) plan.push_back(std::move(batch));
      continue;
    }
    for (size_t b = start; b < end; b += static_cast<size_t>(batch_size))
      plan.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(b),
                        order.begin() + static_cast<std::ptrdiff_t>(std::min(end, b + static_cast<size_t>(batch_size))));
  }
  if (shuffle) {
    std::vector<int64_t> perm(plan.size());
    std::iota(perm.begin(), perm.end(), 0);
    deterministic_shuffle(perm, mix_seed(seed, static_cast<uint64_t>(epoch) * 2 + 2));
    std::vector<std::vector<int64_t>> shuffled;
    shuffled.reserve(plan.size());
    for (int64_t p : perm) shuffled.push_back(std::move(plan[static_cast<size_t>(p)]));
    plan = std::move(shuffled);
  }
  return plan;
}

namespace {
torch::Tensor pad_rows(const std::vector<const std::vector<int64_t>*>& rows, int64_t prefix, int64_t suffix,
                       int64_t* max_len_out) {
  int64_t max_len = 0;
  for (auto* r : rows) max_len = std::max<int64_t>(max_len, static_cast<int64_t>(r->size()) + prefix + suffix);
  max_len = std::max<int64_t>(max_len, 1);
  std::vector<int64_t> ids(rows.size() * static_cast<size_t>(max_len), kPadId);
  for (size_t b = 0; b < rows.size(); ++b) {
    auto at = ids.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(max_len));
    if (prefix) *at++ = kBosId;
    at = std::copy(rows[b]->begin(), rows[b]->end(), at);
    if (suffix) *at = kEosId;
  }
  *max_len_out = max_len;
  return from_host(ids).view({static_cast<int64_t>(rows.size()), max_len});
}
}  // namespace

namespace {
// Source side of a batch from row pointers (no copies of the sentences).
Batch src_batch_from_rows(const std::vector<const std::vector<int64_t>*>& rows) {
  Batch b;
  int64_t s_len = 0;
  b.src = pad_rows(rows, 0, 0, &s_len);
  for (const auto* r : rows) {
    b.src_lengths.push_back(static_cast<int64_t>(r->size()));
    b.src_tokens += static_cast<int64_t>(r->size());
  }
  b.src_len = from_host(b.src_lengths);
  b.src_mask = b.src.ne(kPadId);
  b.padded_cells = b.src.numel();
  return b;
}
}  // namespace

Batch make_src_batch(const std::vector<std::vector<int64_t>>& srcs, const std::vector<int64_t>& indices) {
  std::vector<const std::vector<int64_t>*> rows;
  rows.reserve(indices.size());
  for (int64_t i : indices) rows.push_back(&srcs[static_cast<size_t>(i)]);
  Batch b = src_batch_from_rows(rows);
  b.indices = indices;
  return b;
}

Batch make_batch(const std::vector<EncodedPair>& data, const std::vector<int64_t>& indices) {
  std::vector<const std::vector<int64_t>*> srcs, tgts;
  srcs.reserve(indices.size());
  tgts.reserve(indices.size());
  for (int64_t i : indices) {
    srcs.push_back(&data[static_cast<size_t>(i)].src);
    tgts.push_back(&data[static_cast<size_t>(i)].tgt);
  }
  Batch b = src_batch_from_rows(srcs);
  b.indices = indices;
  int64_t t_len = 0;
  torch::Tensor full = pad_rows(tgts, 1, 1, &t_len);  // <bos> y <eos>
  b.tgt_in = full.slice(1, 0, t_len - 1).clone();
  b.tgt_out = full.slice(1, 1, t_len).clone();
  b.tgt_mask = b.tgt_out.ne(kPadId);
  b.tgt_rows = b.tgt_mask.reshape(-1).nonzero().squeeze(1);
  for (auto* t : tgts) b.tgt_tokens += static_cast<int64_t>(t->size()) + 1;
  b.padded_cells += b.tgt_out.numel();
  return b;
}

std::vector<int64_t> Batch::lengths() const {
  if (!src_lengths.empty() || !src_len.defined()) return src_lengths;
  return cpu_vector<int64_t>(src_len);  // on the CPU by design (Batch::to keeps it there)
}

Batch Batch::to(const torch::Device& device) const {
  // On the CPU, or already there (a caller that moved it once and steps with it many times, as bench does).
  if (device.is_cpu() || src.device() == device) return *this;
  // The int64 tensors side by side in one pinned host buffer, one copy that does not wait; the masks are made
  // from the ids on the device.
  std::vector<torch::Tensor> parts = {src.reshape(-1)};
  if (tgt_in.defined()) {
    parts.push_back(tgt_in.reshape(-1));
    parts.push_back(tgt_out.reshape(-1));
    if (tgt_rows.defined()) parts.push_back(tgt_rows);
  }
  const torch::Tensor packed = to_device(torch::cat(parts), device);
  Batch b = *this;
  int64_t at = 0;
  auto next = [&](const torch::Tensor& like) {
    torch::Tensor t = packed.narrow(0, at, like.numel()).view(like.sizes());
    at += like.numel();
    return t;
  };
  b.src = next(src);
  b.src_mask = b.src.ne(kPadId);
  if (tgt_in.defined()) {
    b.tgt_in = next(tgt_in);
    b.tgt_out = next(tgt_out);
    b.tgt_mask = b.tgt_out.ne(kPadId);
    if (tgt_rows.defined()) b.tgt_rows = next(tgt_rows);
  }
  return b;  // src_len stays on the CPU (pack_padded_sequence wants it there)
}

double padding_fraction(const std::vector<EncodedPair>& data, const std::vector<std::vector<int64_t>>& plan) {
  int64_t cells = 0, real = 0;
  for (const auto& idx : plan) {
    size_t ms = 0, mt = 0;
    for (int64_t i : idx) {
      ms = std::max(ms, data[static_cast<size_t>(i)].src.size());
      mt = std::max(mt, data[static_cast<size_t>(i)].tgt.size() + 1);
      real += static_cast<int64_t>(data[static_cast<size_t>(i)].src.size() + data[static_cast<size_t>(i)].tgt.size() + 1);
    }
    cells += static_cast<int64_t>(idx.size() * (ms + mt));
  }
  return cells ? 1.0 - static_cast<double>(real) / static_cast<double>(cells) : 0.0;
}

}  // namespace attnmt
