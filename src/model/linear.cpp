#include "model/linear.h"

namespace attnmt {

torch::Tensor linear_product(const torch::nn::Module& module, PackedLinear& packed, const torch::Tensor& x,
                             const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!module.is_training() && !torch::GradMode::is_enabled()) return packed(x, weight, bias);
  return train_linear(x, weight, bias);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return linear_product(*this, packed_, x, weight, bias); }

}  // namespace attnmt
