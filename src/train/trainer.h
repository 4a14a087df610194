// Training: data preparation, the step loop, validation, checkpoints with exact resume,
// early stopping, LR schedule, signals.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/vocab.h"
#include "model/seq2seq.h"

namespace attnmt {

class Distributed;

struct TrainOptions {
  bool resume = false;     // continue from run_dir/last.pt
  bool overwrite = false;  // replace an existing run in run_dir
  // Data-parallel group, or null for one process. Each rank trains on its slice of every batch; only
  // rank 0 validates, logs and writes the run directory (which every rank must see to resume).
  Distributed* dist = nullptr;
};

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
  bool finished = false;       // training ended (epochs, max_steps, early stopping)
};

struct ValidationResult {
  double loss = 0;  // per target token
  double ppl = 0;
  double bleu = 0;
};

struct TrainResult {
  TrainerState state;
  std::vector<ValidationResult> validations;
  int exit_code = 0;  // 0, or 130/143 when stopped by SIGINT/SIGTERM
};

// Prepared data for a run.
struct RunData {
  Vocab src_vocab, tgt_vocab;
  std::vector<EncodedPair> train, valid;
  std::vector<std::string> valid_refs;  // raw reference lines of the kept validation pairs
};

TrainResult train(const Config& cfg, const TrainOptions& opt, const torch::Device& device);

// Checkpoint I/O. load_checkpoint throws UsageError on a missing, truncated or mismatched file.
// rank_rng[r] (r >= 1) is the CPU generator state of rank r in a data-parallel run, kept for exact resume.
void save_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, const TrainerState& st,
                     const std::vector<torch::Tensor>& rank_rng = {});
// Restores model, optimizer and the CPU generator (rank `rank`'s state where the checkpoint has one; returns
// false in rank_rng_found when a rank > 0 found none).
TrainerState load_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, int rank = 0,
                             bool* rank_rng_found = nullptr);

// The rows of a batch (example indices) that rank `rank` of `world` trains on: a contiguous slice,
// as equal as possible; may be empty when the batch has fewer rows than ranks.
std::vector<int64_t> shard_rows(const std::vector<int64_t>& rows, int rank, int world);

// Validation loss/perplexity (teacher forced) and greedy BLEU.
ValidationResult validate(Seq2Seq& model, const RunData& data, const Config& cfg, const torch::Device& device);

// Cross-entropy summed over real target tokens, with label smoothing: logits [B, T, V] with target [B, T]
// (padding skipped), or [N, V] with [N] (the output of a forward with a target mask, with
// target = tgt_out.masked_select(tgt_mask)).
torch::Tensor sequence_loss(const torch::Tensor& logits, const torch::Tensor& target, double label_smoothing);

struct BatchLoss {
  torch::Tensor sum;   // loss summed over the batch's real target tokens (a scalar with a gradient)
  Seq2SeqOutput out;   // the forward's output; its logits are [N, V], one row per real target token
};

// The loss of a batch with the readout and output layer run over its real target positions only (what
// training, validation and `evaluate` use).
BatchLoss batch_loss(Seq2Seq& model, const Batch& b, double label_smoothing, double teacher_forcing = 1.0);

// Requests a graceful stop (as SIGINT would); used by the signal handler and tests.
void request_stop(int signal_number);

}  // namespace attnmt
