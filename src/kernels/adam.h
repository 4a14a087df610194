// Adam's update in one pass over each parameter (float CPU tensors): what torch::optim::Adam::step computes, on
// the optimizer's own state (the same exp_avg / exp_avg_sq / step entries, so checkpoints and resuming are
// unchanged), where LibTorch's step makes eight passes over every parameter and allocates two temporaries.
#pragma once
#include <torch/torch.h>

namespace attnmt {

// One Adam step of optim. Parameters that are not contiguous float CPU tensors, or the amsgrad variant, go
// through optim.step() (the whole step then, so that every parameter is updated the same way). max_lanes (4, 8 or
// 16) caps the vector lanes, for tests.
void adam_step(torch::optim::Adam& optim, int max_lanes = 16);

}  // namespace attnmt
