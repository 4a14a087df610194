// Training: data preparation, the step loop, validation, checkpoints with exact resume (model/checkpoint.h),
// early stopping, LR schedule, signals.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "data/batcher.h"
#include "data/corpus.h"
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/loss.h"
#include "model/seq2seq.h"

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

// The rows of a batch (example indices) that rank `rank` of `world` trains on: a contiguous slice,
// as equal as possible; may be empty when the batch has fewer rows than ranks.
std::vector<int64_t> shard_rows(const std::vector<int64_t>& rows, int rank, int world);

// Validation loss/perplexity (teacher forced) and greedy BLEU.
ValidationResult validate(Seq2Seq& model, const RunData& data, const Config& cfg, const torch::Device& device);

// The two halves of one training update, shared by train() and `attnmt bench` so that the benchmark times
// the code users run. accumulate_gradients: forward and backward of batch b (already on the model's device)
// with the loss summed over its real target tokens and divided by batch_tokens (the whole batch's count, so
// that data-parallel slices add up to the one-process gradient); returns the loss sum. apply_update: gradient
// clipping by global norm (clip_norm 0 = off) and the optimizer step.
double accumulate_gradients(Seq2Seq& model, const Batch& b, int64_t batch_tokens, double label_smoothing,
                            double teacher_forcing);
void apply_update(Seq2Seq& model, torch::optim::Optimizer& optim, double clip_norm);

// Requests a graceful stop (as SIGINT would); used by the signal handler and tests.
void request_stop(int signal_number);

}  // namespace attnmt
