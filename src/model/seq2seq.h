// The encoder-decoder model and its factory.
#pragma once
#include <torch/torch.h>

#include "common/config.h"
#include "model/decoder.h"
#include "model/encoder.h"

namespace attnmt {

struct Seq2SeqOutput {
  torch::Tensor logits;        // [B, T, V]; [N, V] at the N real target positions when a target mask was given
  torch::Tensor weights;       // [B, T, S] or undefined (no attention)
  torch::Tensor head_weights;  // [B, heads, T, S] or undefined
  std::vector<torch::Tensor> encoder_self_weights;  // self-attention encoder: per layer [B, heads, S, S]
  std::vector<torch::Tensor> decoder_self_weights;  // self-attention decoder (teacher-forced pass): per layer [B, heads, T, T]
};

class Seq2SeqImpl : public torch::nn::Module {
 public:
  Seq2SeqImpl(const ModelConfig& cfg, int64_t src_vocab, int64_t tgt_vocab);
  EncoderOutput encode(const torch::Tensor& src, const torch::Tensor& src_len, const torch::Tensor& src_mask);
  // Teacher-forced decoding of tgt_in given an encoding (tests perturb the encoding through this).
  // With tgt_mask ([B, T] bool, true at real target positions) the readout and the output layer run over
  // those positions only, in row-major order (the rows of tgt_out.masked_select(tgt_mask)): padding costs
  // no readout or output-layer product and no loss work. The attention weights keep their [B, T, S] shape.
  // tgt_rows, when given, are those positions already found (tgt_mask.reshape(-1).nonzero(), as Batch holds them):
  // finding them on a GPU would stop it until it has counted them.
  Seq2SeqOutput decode(const EncoderOutput& enc, const torch::Tensor& tgt_in, double teacher_forcing = 1.0,
                       bool stepwise = false, const torch::Tensor& tgt_mask = {}, const torch::Tensor& tgt_rows = {});
  Seq2SeqOutput forward(const torch::Tensor& src, const torch::Tensor& src_len, const torch::Tensor& src_mask,
                        const torch::Tensor& tgt_in, double teacher_forcing = 1.0, bool stepwise = false,
                        const torch::Tensor& tgt_mask = {}, const torch::Tensor& tgt_rows = {});
  int64_t parameter_count() const;
  const ModelConfig& config() const { return cfg_; }
  int64_t src_vocab() const { return src_vocab_; }
  int64_t tgt_vocab() const { return tgt_vocab_; }

  Encoder encoder{nullptr};
  Decoder decoder{nullptr};

 private:
  ModelConfig cfg_;
  int64_t src_vocab_, tgt_vocab_;
};
TORCH_MODULE(Seq2Seq);

}  // namespace attnmt
