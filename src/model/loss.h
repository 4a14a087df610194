// The training loss: label-smoothed cross-entropy over the real target tokens, as one autograd node, and
// the loss of a teacher-forced batch with the readout and output layer run over its real positions only
// (what training, validation, `evaluate` and `bench` all use).
#pragma once
#include <torch/torch.h>

#include "model/seq2seq.h"

namespace attnmt {

// Cross-entropy summed over real target tokens (target id <pad> is skipped), with label smoothing eps:
// loss_i = (1 - eps) (lse_i - x_i[t_i]) + eps (lse_i - mean_c x_ic). logits [B, T, V] with target [B, T],
// or [N, V] with [N] (the output of a forward with a target mask, target = tgt_out.masked_select(tgt_mask)).
torch::Tensor sequence_loss(const torch::Tensor& logits, const torch::Tensor& target, double label_smoothing);

struct BatchLoss {
  torch::Tensor sum;   // loss summed over the batch's real target tokens (a scalar with a gradient)
  Seq2SeqOutput out;   // the forward's output; its logits are [N, V], one row per real target token
};

// The teacher-forced loss of one batch: src [B, S], src_len [B], src_mask [B, S], tgt_in / tgt_out /
// tgt_mask [B, T] (the tensors of data/batcher.h's Batch).
BatchLoss teacher_forced_loss(Seq2Seq& model, const torch::Tensor& src, const torch::Tensor& src_len,
                              const torch::Tensor& src_mask, const torch::Tensor& tgt_in, const torch::Tensor& tgt_out,
                              const torch::Tensor& tgt_mask, double label_smoothing, double teacher_forcing = 1.0,
                              const torch::Tensor& tgt_rows = {});

// The same for anything that carries those tensors under those names (a Batch), without model/ having to
// know the batcher.
template <class TeacherForcedBatch>
BatchLoss batch_loss(Seq2Seq& model, const TeacherForcedBatch& b, double label_smoothing, double teacher_forcing = 1.0) {
  return teacher_forced_loss(model, b.src, b.src_len, b.src_mask, b.tgt_in, b.tgt_out, b.tgt_mask, label_smoothing,
                             teacher_forcing, b.tgt_rows);
}

}  // namespace attnmt
