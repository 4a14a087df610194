// Length-bucketed batching: shuffle with the seed, sort within pools so padding stays small, cut into
// batches, shuffle the batch order. The same (seed, epoch) always gives the same batches.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "common/random.h"

namespace attnmt {

struct EncodedPair {
  std::vector<int64_t> src;  // source ids (no <bos>/<eos>)
  std::vector<int64_t> tgt;  // target ids (no <bos>/<eos>)
};

struct Batch {
  torch::Tensor src;       // [B, S] int64, padded with <pad>
  torch::Tensor src_len;   // [B] int64 (CPU)
  std::vector<int64_t> src_lengths;  // the same lengths on the host (a search's limits need no read); see lengths()
  torch::Tensor src_mask;  // [B, S] bool, true at real tokens
  torch::Tensor tgt_in;    // [B, T] int64: <bos> y1 .. yn, padded
  torch::Tensor tgt_out;   // [B, T] int64: y1 .. yn <eos>, padded
  torch::Tensor tgt_mask;  // [B, T] bool, true at real target positions
  torch::Tensor tgt_rows;  // [N] int64: the flat positions of tgt_mask's real tokens (found on the CPU, so that a
                           // device never has to stop to count them)
  std::vector<int64_t> indices;  // which examples, in row order
  int64_t src_tokens = 0;  // real source tokens
  int64_t tgt_tokens = 0;  // real target tokens (including <eos>)
  int64_t padded_cells = 0;  // B*S + B*T
  // The batch on a device: its tensors in one pinned buffer, one copy that does not wait (CPU: itself).
  Batch to(const torch::Device& device) const;
  // The source lengths on the host: src_lengths, or for a batch put together by hand, src_len's values.
  std::vector<int64_t> lengths() const;
};

// The deterministic order of example indices per batch for one epoch: batch_size sentences per batch,
// or, with batch_tokens > 0, as many as fit in batch_tokens padded target tokens (sentences x the longest
// target with <eos>; a longer sentence goes alone). Pools of pool_batches batches are sorted by length.
std::vector<std::vector<int64_t>> make_batch_plan(const std::vector<EncodedPair>& data, int batch_size, uint64_t seed,
                                                  int64_t epoch, bool shuffle, int pool_batches = 50, int64_t batch_tokens = 0);

// Builds the padded tensors of one batch (on the CPU). With tgt empty (decoding) only src is filled.
Batch make_batch(const std::vector<EncodedPair>& data, const std::vector<int64_t>& indices);

// Source-only batch for decoding.
Batch make_src_batch(const std::vector<std::vector<int64_t>>& srcs, const std::vector<int64_t>& indices);

// Fraction of padding cells over all batches of a plan (source and target).
double padding_fraction(const std::vector<EncodedPair>& data, const std::vector<std::vector<int64_t>>& plan);

}  // namespace attnmt
