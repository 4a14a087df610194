// Attention snapshots during training: a few fixed validation sentences (train.snapshot_sentences), their
// attention maps at every validation in run_dir/progress/, and the page that plays them back
// (viz/progress.h). Taken in eval mode without gradients: the training trajectory does not change.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model/seq2seq.h"
#include "run/run_data.h"
#include "run/run_dir.h"
#include "viz/progress.h"

namespace attnmt {

class AttentionSnapshots {
 public:
  // Picks n validation sentences spread over the source lengths, the longest last (n = 0: none).
  AttentionSnapshots(const RunData& data, int n);
  // The chosen validation examples (indices into data.valid), for tests.
  const std::vector<int64_t>& sentences() const { return rows_; }
  // Writes progress/step-<step>.json and redraws progress/index.html (for a model without attention, only
  // the page that says so).
  void write(Seq2Seq& model, const RunDir& dir, int64_t step, int64_t epoch, double valid_bleu, const torch::Device& device);

 private:
  const RunData& data_;
  std::vector<int64_t> rows_;
  // The snapshots of this run so far: read from progress/ once (a resumed run's earlier ones), then appended.
  std::vector<ProgressSnapshot> history_;
  bool loaded_ = false;
};

}  // namespace attnmt
