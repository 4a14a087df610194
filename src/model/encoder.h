// The encoder: embeddings and a (bidirectional, stacked) RNN over the source, or a self-attention stack
// (model.encoder.type), giving the states attention reads and the final state that starts an RNN decoder.
#pragma once
#include <torch/torch.h>

#include "common/config.h"
#include "model/dropout.h"
#include "model/rnn.h"
#include "model/self_attention.h"

namespace attnmt {

struct EncoderOutput {
  torch::Tensor states;  // [B, S, H] (H = hidden_dim; both directions concatenated)
  torch::Tensor mask;    // [B, S] bool
  torch::Tensor final_h; // [B, H] last layer's final state, both directions (self-attention: the mean of the states)
  torch::Tensor final_c; // [B, H] LSTM cell (undefined for GRU; self-attention: final_h)
  std::vector<torch::Tensor> self_weights;  // self-attention encoder: per layer [B, heads, S, S]
};

class EncoderImpl : public torch::nn::Module {
 public:
  EncoderImpl(const ModelConfig& cfg, int64_t vocab);
  // src [B, S] int64, lengths [B] int64 on the CPU, mask [B, S] bool.
  EncoderOutput forward(const torch::Tensor& src, const torch::Tensor& lengths, const torch::Tensor& mask);
  // The same from the source embeddings [B, S, E] (embed(src)), so that attributions can take gradients with
  // respect to them (the lab's gradient x input).
  EncoderOutput from_embeddings(const torch::Tensor& emb, const torch::Tensor& lengths, const torch::Tensor& mask);
  torch::Tensor embed_tokens(const torch::Tensor& src) { return embed(src); }  // [B, S] -> [B, S, E]
  bool is_self_attention() const { return static_cast<bool>(self_attention); }
  // The self-attention stack (is_self_attention() only): its layers, for whoever observes them (attnmt explain).
  const SelfAttentionEncoder& self_attention_stack() const { return self_attention; }

 private:
  bool bidirectional_;
  int64_t layers_;
  bool lstm_;
  torch::nn::Embedding embed{nullptr};
  Dropout drop{nullptr};
  Rnn rnn{nullptr};                                // model.encoder.type rnn
  SelfAttentionEncoder self_attention{nullptr};    // model.encoder.type self_attention
};
TORCH_MODULE(Encoder);

}  // namespace attnmt
