// Analytic FLOP counts of the model as configured (matrix products only; 1 multiply-add = 2 FLOPs).
// Elementwise work (tanh, softmax, adds) is not counted. A training step counts 3x the forward pass
// (forward, and backward for inputs and weights).
#pragma once
#include <cstdint>

#include "common/config.h"

namespace attnmt {

struct FlopCount {
  double encoder = 0;    // encoder RNN over all source tokens
  double bridge = 0;     // initial decoder state
  double keys = 0;       // projections of the encoder states (once per batch)
  double decoder = 0;    // decoder RNN, attention, combine, over all target steps
  double output = 0;     // output layer over all target steps
  double forward() const { return encoder + bridge + keys + decoder + output; }
  double train_step() const { return 3 * forward(); }
};

// One batch of B sentence pairs with S source and T target tokens each.
FlopCount count_flops(const ModelConfig& m, int64_t tgt_vocab, int64_t B, int64_t S, int64_t T);

}  // namespace attnmt
