// Checkpoints: the model's parameters, the optimizer's state, the training position (for exact resume)
// and the random state, in one file written atomically. A checkpoint records the format it was written in
// and the model type it holds; loading checks both and every parameter's shape before anything is used.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/seq2seq.h"

namespace attnmt {

// The checkpoint layout this build writes. Version 1 (no "format_version" entry) is the same layout
// without the version and model-type entries and is still read.
constexpr int64_t kCheckpointFormat = 2;

// What is saved with every checkpoint besides model and optimizer.
struct TrainerState {
  int64_t step = 0;            // optimizer updates done
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // next batch of the epoch's plan
  double best_metric = 0;      // best validation metric so far
  bool has_best = false;
  int64_t bad_validations = 0; // early stopping counter
  int64_t plateau_bad = 0;     // LR schedule counter
  double lr = 0;               // current learning rate
  double elapsed_s = 0;        // training time before this process
  int64_t target_tokens = 0;   // target tokens trained on, <eos> included, padding not (whole run)
  double valid_s = 0;          // of elapsed_s: time in validations and their checkpoint writes
  double peak_rss_mb = 0;      // the highest peak resident memory of the run's processes so far
  bool finished = false;       // training ended (epochs, max_steps, early stopping)
};

// The model type a checkpoint records, e.g. "gru/bahdanau" or "lstm/luong-general".
std::string model_type(const ModelConfig& m);

struct SaveOptions {
  // r >= 1: the CPU generator state of rank r in a data-parallel run, kept for exact resume.
  std::vector<torch::Tensor> rank_rng;
  // r >= 1: the CUDA generator state of rank r, when the run is on CUDA.
  std::vector<torch::Tensor> rank_rng_cuda;
  int pause_ms = 0;  // tests: pause after the first bytes, widening the window in which a kill hits a half-written file
};

// The device of the model's parameters.
torch::Device model_device(Seq2Seq& model);

// Writes path atomically (temporary file + rename). Throws Error naming the path when the write fails
// (disk full, file-size limit); the previous file at path then stays as it was.
void save_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, const TrainerState& st,
                     const SaveOptions& opt = {});

// Restores model, optimizer (when given) and the CPU generator (and the CUDA one when the model is on CUDA) (rank `rank`'s state where the checkpoint has
// one; rank_rng_found is set to false when a rank > 0 found none). Throws UsageError with one line on a
// missing, truncated or corrupt file, a newer format, another model type, or another parameter shape.
TrainerState load_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, int rank = 0,
                             bool* rank_rng_found = nullptr);

// The element-wise mean of the parameters and buffers of the checkpoints at paths (each loaded into model, so
// each must hold model's type and shapes: a mismatch throws UsageError naming the file and the parameter).
// Leaves the mean in model and returns the training state of the last checkpoint.
TrainerState average_checkpoints(const std::vector<std::string>& paths, Seq2Seq& model);

}  // namespace attnmt
