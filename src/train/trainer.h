// Training: the Trainer (one update, validation with its bookkeeping, checkpoints, stopping rules) and
// train(), the loop that runs it over a run directory (data preparation, logs, metrics, signals, resume).
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "common/errors.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/loss.h"
#include "model/seq2seq.h"
#include "run/run_data.h"

namespace attnmt {

class Distributed;

struct TrainOptions {
  bool resume = false;     // continue from run_dir/last.pt
  bool overwrite = false;  // replace an existing run in run_dir
  // Data-parallel group, or null for one process. Each rank trains on its slice of every batch; only
  // rank 0 validates, logs and writes the run directory (which every rank must see to resume).
  Distributed* dist = nullptr;
  // Test hooks (the CLI fills them from ATTNMT_TEST_* variables; never set in normal use):
  int test_checkpoint_pause_ms = 0;  // pause inside every checkpoint write, so that a kill can hit one half-written
  int64_t test_nan_at_step = 0;      // report the loss of this step (1-based) as NaN, to exercise the NaN check
};

struct ValidationResult {
  double loss = 0;  // per target token
  double ppl = 0;
  double bleu = 0;
  bool improved = false;  // best so far on the early-stopping metric (Trainer::validate)
};

struct TrainResult {
  TrainerState state;
  std::vector<ValidationResult> validations;
  int exit_code = 0;     // 0, or 130/143 when stopped by SIGINT/SIGTERM
  std::string ended_by;  // Trainer::stop_reason() at the end, or "signal"
};

// A training loss that is NaN or infinite; the update was not applied.
struct NonFiniteLoss : Error {
  using Error::Error;
};

// What one call of Trainer::step did, as every rank agrees.
struct StepResult {
  double loss_sum = 0;   // loss summed over the whole batch's target tokens (all ranks); 0 while `pending`
  // On a GPU (one process) the loss stays there: reading it every step would stop the GPU until the step is done.
  // Then pending holds it (a 0-dim tensor on the device) and the caller reads it when it logs (read_loss).
  torch::Tensor pending;
  int signal = 0;        // a stop request seen by any rank (SIGTERM wins over SIGINT), or 0
  bool time_up = false;  // train.max_minutes reached (rank 0's clock)
};

// The value of a window of pending losses (summed on the device), read once; NonFiniteLoss when it is NaN or
// infinite, naming the step it was read at.
double read_loss(const torch::Tensor& pending, int64_t step);

// One model being trained: its optimizer, position and counters (TrainerState), and the rules that end
// training. train() drives it over a corpus; `attnmt bench` times the same step() on a synthetic batch.
class Trainer {
 public:
  // Creates the Adam optimizer for model (already on device). With resume_from, restores model, optimizer,
  // state and random state from that checkpoint. In a data-parallel group, every rank then starts from
  // rank 0's weights and gradients go into the group's flat buckets.
  Trainer(Seq2Seq model, const TrainConfig& cfg, torch::Device device, const TrainOptions& opt = {},
          const std::string& resume_from = "");

  // One update on this rank's slice of a batch (may be empty when the batch has fewer rows than ranks):
  // forward and backward with the loss summed over target tokens and divided by batch_tokens (the whole
  // batch's count, so that the ranks' slices add up to the one-process gradient), gradient all-reduce,
  // agreement on the loss and on stop requests (local_signal: a signal this rank received, or 0), then
  // gradient clipping and the optimizer step. Throws NonFiniteLoss, before updating, when the loss is not
  // finite.
  StepResult step(const Batch* slice, int64_t batch_tokens, int local_signal = 0);

  // Validation loss, perplexity and greedy BLEU on data.valid (computed by rank 0 and shared), then the
  // bookkeeping: best metric, early-stopping counter, plateau LR schedule.
  ValidationResult validate(const RunData& data, const Config& cfg);

  // Writes a checkpoint of the current state to each path (collective in a group: every rank's random
  // state is gathered; rank 0 writes).
  void save(const std::vector<std::string>& paths);

  // True when a limit ends training: epochs, max_steps, max_minutes (as of the last step) or early stopping.
  bool should_stop() const { return !stop_reason().empty(); }
  // Which limit ends training, in the words the log and train.json use: "early stopping", "max_minutes",
  // "max_steps" or "epochs" (the first that holds, in that order), or "" while none does.
  std::string stop_reason() const;

  // Training time: before this process (from the checkpoint) plus since construction.
  double elapsed_s() const;

  // The rate in effect for the next update: the schedule's rate (state().lr), scaled by the warm-up while it lasts.
  double current_lr() const;
  TrainerState& state() { return st_; }
  const TrainerState& state() const { return st_; }
  Seq2Seq& model() { return model_; }
  torch::optim::Adam& optimizer() { return optim_; }
  Distributed* dist() const { return opt_.dist; }
  bool main_rank() const;

 private:
  void set_lr(double lr);
  void step_schedule();  // lr_schedule `step`, after each update

  Seq2Seq model_;
  TrainConfig cfg_;
  torch::Device device_;
  TrainOptions opt_;
  torch::optim::Adam optim_;
  TrainerState st_;
  double t0_ = 0, base_elapsed_ = 0;
  bool time_up_ = false;
};

// Trains cfg's run (src/train/train_loop.cpp): reads everything first, then writes run_dir (config, vocabularies,
// train.log, metrics, curves, checkpoints) as training goes; SIGINT/SIGTERM stop it at the next step with last.pt.
TrainResult train(const Config& cfg, const TrainOptions& opt, const torch::Device& device);

// The rows of a batch (example indices) that rank `rank` of `world` trains on: a contiguous slice,
// as equal as possible; may be empty when the batch has fewer rows than ranks.
std::vector<int64_t> shard_rows(const std::vector<int64_t>& rows, int rank, int world);

// Validation loss/perplexity (teacher forced) and greedy BLEU, without bookkeeping.
ValidationResult validate(Seq2Seq& model, const RunData& data, const Config& cfg, const torch::Device& device);

// Requests a graceful stop (as SIGINT would); used by the signal handler and tests.
void request_stop(int signal_number);

}  // namespace attnmt
