// Dropout that dispatches nothing where it does nothing: torch::nn::Dropout calls ATen's dropout even in evaluation
// or at p = 0, one operation (a kernel launch on a GPU) each time for an identity. Same module name, no parameters:
// checkpoints are unchanged.
#pragma once
#include <torch/torch.h>

namespace attnmt {

class DropoutImpl : public torch::nn::Module {
 public:
  explicit DropoutImpl(double p) : p_(p) { TORCH_CHECK(p >= 0 && p <= 1, "dropout probability must be in [0, 1], got ", p); }
  torch::Tensor forward(const torch::Tensor& x) { return is_training() && p_ > 0 ? torch::dropout(x, p_, true) : x; }

 private:
  double p_;
};
TORCH_MODULE(Dropout);

}  // namespace attnmt
