// Adam's update in one pass over each parameter (float CPU tensors): what torch::optim::Adam::step computes, on
// the optimizer's own state (the same exp_avg / exp_avg_sq / step entries, so checkpoints and resuming are
// unchanged), where LibTorch's step makes eight passes over every parameter and allocates two temporaries.
#pragma once
#include <sstream>
#include <string>
#include <type_traits>

#include <torch/torch.h>

namespace attnmt {

// One Adam step of optim. Where a parameter is not a contiguous float CPU tensor (a GPU's, or any under --kernels
// reference), the whole step is LibTorch's Adam made of multi-tensor (_foreach_) operations, so that every parameter
// is updated the same way; the amsgrad variant goes through optim.step(). max_lanes (4, 8 or 16) caps the vector
// lanes, for tests.
void adam_step(torch::optim::Adam& optim, int max_lanes = 16);

// The key a LibTorch optimizer keeps a parameter's state under: the address of its TensorImpl as text in LibTorch 1.x
// (std::string keys), the address itself in 2.x (void* keys). The one place that knows the difference.
template <class StateMap>
typename StateMap::key_type optimizer_state_key(const StateMap&, const torch::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;  // what LibTorch 1.x writes: operator<< of the pointer
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace attnmt
