#include "model/loss.h"

#include "common/precision.h"
#include "data/special_tokens.h"
#include "kernels/softmax_rows.h"

namespace attnmt {

namespace {
// Label-smoothed cross-entropy summed over the rows whose target is not <pad>, in one autograd node; float
// logits on the CPU go through the row kernels of kernels/packed_product.h (two passes forward, one backward).
// Backward writes the gradient softmax(x) - (1 - eps) onehot(t) - eps / V into one [N, V] buffer; the
// stock cross_entropy keeps log_softmax's output and builds several [N, V] gradients on the way.
struct SmoothedCrossEntropy : public torch::autograd::Function<SmoothedCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, double eps) {
    torch::Tensor valid = target.ne(kPadId);
    torch::Tensor t = target.masked_fill(valid.logical_not(), 0);
    ctx->saved_data["eps"] = eps;
    CrossEntropyRows rows;
    if (cross_entropy_rows(logits, t, valid, eps, &rows)) {  // float on the CPU: the two-pass row kernel
      ctx->save_for_backward({logits, rows.lse, t, valid});
      return rows.loss.sum();
    }
    torch::Tensor lse = logits.logsumexp(1);
    torch::Tensor picked = logits.gather(1, t.unsqueeze(1)).squeeze(1);
    torch::Tensor per_row = (lse - picked) * (1.0 - eps);
    if (eps > 0) per_row = per_row + (lse - logits.mean(1)) * eps;
    ctx->save_for_backward({logits, lse, t, valid});
    return per_row.masked_fill(valid.logical_not(), 0).sum();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &lse = saved[1], &t = saved[2], &valid = saved[3];
    const double eps = ctx->saved_data["eps"].toDouble();
    torch::Tensor grad;
    if (cross_entropy_grad(logits, t, lse, valid.to(logits.scalar_type()) * grads[0], eps, &grad))
      return {grad, torch::Tensor(), torch::Tensor()};
    grad = logits.sub(lse.unsqueeze(1)).exp_();  // softmax
    if (eps > 0) grad.sub_(eps / static_cast<double>(logits.size(1)));
    grad.scatter_add_(1, t.unsqueeze(1), torch::full({logits.size(0), 1}, eps - 1.0, grad.options()));
    grad.mul_((valid.to(grad.scalar_type()) * grads[0]).unsqueeze(1));
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor sequence_loss(const torch::Tensor& logits, const torch::Tensor& target, double label_smoothing) {
  const bool padded = logits.dim() == 3 && target.dim() == 2 && logits.size(0) == target.size(0) &&
                      logits.size(1) == target.size(1);
  const bool packed = logits.dim() == 2 && target.dim() == 1 && logits.size(0) == target.size(0);
  TORCH_CHECK(padded || packed, "sequence_loss: logits [B, T, V] with target [B, T], or [N, V] with [N] expected, got ",
              logits.sizes(), " and ", target.sizes());
  // The loss in float32 whatever the logits' precision (bfloat16 under bf16 autocast).
  return SmoothedCrossEntropy::apply(float_if_reduced(logits).reshape({-1, logits.size(-1)}), target.reshape(-1), label_smoothing);
}

BatchLoss teacher_forced_loss(Seq2Seq& model, const torch::Tensor& src, const torch::Tensor& src_len,
                              const torch::Tensor& src_mask, const torch::Tensor& tgt_in, const torch::Tensor& tgt_out,
                              const torch::Tensor& tgt_mask, double label_smoothing, double teacher_forcing,
                              const torch::Tensor& tgt_rows) {
  TORCH_CHECK(tgt_out.sizes() == tgt_in.sizes() && tgt_mask.sizes() == tgt_in.sizes(),
              "batch_loss: tgt_in, tgt_out and tgt_mask [B, T] expected, got ", tgt_in.sizes(), ", ", tgt_out.sizes(),
              " and ", tgt_mask.sizes());
  Seq2SeqOutput out = model->forward(src, src_len, src_mask, tgt_in, teacher_forcing, false, tgt_mask, tgt_rows);
  // The targets of those rows: tgt_out.masked_select(tgt_mask), without the device having to count them.
  const torch::Tensor target =
      tgt_rows.defined() ? tgt_out.reshape(-1).index_select(0, tgt_rows) : tgt_out.masked_select(tgt_mask);
  torch::Tensor loss = sequence_loss(out.logits, target, label_smoothing);
  return {loss, out};
}

}  // namespace attnmt
