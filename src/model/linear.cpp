#include "model/linear.h"

namespace attnmt {

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (!is_training() && !torch::GradMode::is_enabled()) return packed_(x, weight, bias);
  return train_linear(x, weight, bias);
}

}  // namespace attnmt
