#include "model/seq2seq.h"

#include "common/precision.h"

namespace attnmt {

Seq2SeqImpl::Seq2SeqImpl(const ModelConfig& cfg, int64_t src_vocab, int64_t tgt_vocab)
    : cfg_(cfg), src_vocab_(src_vocab), tgt_vocab_(tgt_vocab) {
  encoder = register_module("encoder", Encoder(cfg, src_vocab));
  decoder = register_module("decoder", Decoder(cfg, tgt_vocab));
}

EncoderOutput Seq2SeqImpl::encode(const torch::Tensor& src, const torch::Tensor& src_len, const torch::Tensor& src_mask) {
  const Autocast bf16(src.device());  // under train.precision / --precision bf16; nothing otherwise
  return encoder->forward(src, src_len, src_mask);
}

Seq2SeqOutput Seq2SeqImpl::decode(const EncoderOutput& enc, const torch::Tensor& tgt_in, double teacher_forcing,
                                  bool stepwise, const torch::Tensor& tgt_mask, const torch::Tensor& tgt_rows) {
  TORCH_CHECK(tgt_in.size(0) == enc.states.size(0), "Seq2Seq: target batch ", tgt_in.size(0), " vs source ",
              enc.states.size(0));
  const Autocast bf16(tgt_in.device());
  DecoderState state = decoder->init_state(enc);
  AttentionMemory mem = decoder->prepare(enc);
  torch::Tensor rows;  // flat positions of the real target tokens, when a mask says which
  if (tgt_mask.defined()) {
    TORCH_CHECK(tgt_mask.scalar_type() == torch::kBool && tgt_mask.sizes() == tgt_in.sizes(),
                "Seq2Seq: tgt_mask must be bool [B, T] like tgt_in ", tgt_in.sizes(), ", got ", tgt_mask.sizes());
    rows = tgt_rows.defined() ? tgt_rows : tgt_mask.reshape(-1).nonzero().squeeze(1);
    TORCH_CHECK(rows.dim() == 1, "Seq2Seq: tgt_rows must be [N], got ", rows.sizes());
  }
  DecoderOutput d = decoder->forward(tgt_in, state, mem, teacher_forcing, stepwise, rows);
  // the output layer once over all (real) steps
  return {decoder->logits(d.readout), d.weights, d.head_weights, enc.self_weights, std::move(d.self_weights)};
}

Seq2SeqOutput Seq2SeqImpl::forward(const torch::Tensor& src, const torch::Tensor& src_len, const torch::Tensor& src_mask,
                                   const torch::Tensor& tgt_in, double teacher_forcing, bool stepwise,
                                   const torch::Tensor& tgt_mask, const torch::Tensor& tgt_rows) {
  const Autocast bf16(src.device());  // one region: each weight cast to bfloat16 once
  return decode(encode(src, src_len, src_mask), tgt_in, teacher_forcing, stepwise, tgt_mask, tgt_rows);
}

int64_t Seq2SeqImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace attnmt
