// y = W x + b as the model's equations write it: w_query(q), combine([y; c]), out(h~). Which product computes it is
// decided here, not in the model code: while decoding (the module in eval mode, no gradients) the packed copy of W
// (kernels/packed_product.h: PackedLinear, refreshed when W changes); otherwise train_linear, attnmt's training kernel
// where it wins and LibTorch's linear elsewhere. On a GPU, and under --kernels reference, both are LibTorch's linear.
// The parameters, their names ("weight", "bias") and their initialisation are torch::nn::Linear's, so checkpoints and
// seeds are unchanged.
#pragma once
#include <torch/torch.h>

#include "kernels/packed_product.h"

namespace attnmt {

class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& x);

 private:
  PackedLinear packed_;  // W packed once for decoding
};
TORCH_MODULE(Linear);

// x W^T + b by the rule above for a weight that lives elsewhere (the tied output layer's, which is the embedding table):
// the packed copy `packed` while `module` decodes, train_linear otherwise.
torch::Tensor linear_product(const torch::nn::Module& module, PackedLinear& packed, const torch::Tensor& x,
                             const torch::Tensor& weight, const torch::Tensor& bias);

// Options for a linear map without a bias term (W x).
inline torch::nn::LinearOptions without_bias(int64_t in, int64_t out) { return torch::nn::LinearOptions(in, out).bias(false); }

}  // namespace attnmt
