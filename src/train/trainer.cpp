#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/version.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "common/host.h"
#include "common/precision.h"
#include "common/progress.h"
#include "common/random.h"
#include "data/text.h"
#include "eval/bleu.h"
#include "kernels/adam.h"
#include "kernels/mode.h"
#include "model/attention.h"
#include "run/run_dir.h"
#include "train/distributed.h"
#include "train/launcher.h"
#include "train/snapshots.h"
#include "translate/search.h"
#include "viz/charts.h"

namespace attnmt {

namespace fs = std::filesystem;

std::vector<int64_t> shard_rows(const std::vector<int64_t>& rows, int rank, int world) {
  TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_rows: rank ", rank, " of ", world);
  const size_t n = rows.size(), w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  return std::vector<int64_t>(rows.begin() + static_cast<std::ptrdiff_t>(r * n / w),
                              rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * n / w));
}

ValidationResult validate(Seq2Seq& model, const RunData& data, const Config& cfg, const torch::Device& device) {
  torch::NoGradGuard ng;
  model->eval();
  ValidationResult r;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));  // read once
  int64_t tokens = 0;
  auto plan = make_batch_plan(data.valid, cfg.eval.batch_size, 0, 0, false);
  std::vector<std::string> hyps(data.valid.size());
  const SearchOptions so = search_options(cfg.eval, 1);  // greedy: validation BLEU
  for (const auto& idx : plan) {
    Batch b = make_batch(data.valid, idx);
    Batch db = b.to(device);
    {
      const ScopedAttentionMaps no_maps(false);  // the loss alone: the fused attention where it applies
      loss_sum += batch_loss(model, db, 0.0).sum.to(torch::kDouble);
    }
    tokens += b.tgt_tokens;
    auto hs = greedy_search(model, b, so, device);
    for (size_t k = 0; k < idx.size(); ++k)
      hyps[static_cast<size_t>(idx[k])] = data.tok.decode(data.tgt_vocab.decode(hs[k].tokens), Side::kTarget);
  }
  r.loss = tokens ? host_scalar<double>(loss_sum) / static_cast<double>(tokens) : 0.0;
  r.ppl = std::exp(std::min(r.loss, 100.0));
  r.bleu = corpus_bleu(hyps, {data.valid_refs}).score;
  model->train();
  return r;
}


double read_loss(const torch::Tensor& pending, int64_t step) {
  if (!pending.defined()) return 0;
  const double v = host_scalar<double>(pending);
  if (!std::isfinite(v))
    throw NonFiniteLoss("loss became " + std::string(std::isnan(v) ? "NaN" : "infinite") + " by step " + std::to_string(step));
  return v;
}

namespace {
// Scales the gradients so that their joint L2 norm is at most max_norm: g <- g * min(1, max_norm / (||g|| + 1e-6)).
// LibTorch's clip_grad_norm_ does the same but reads the norm back to the host (a stop per step on a GPU); here the
// factor stays a tensor on the gradients' device, and the norms and the scaling are multi-tensor operations (the
// scaling by a tensor from LibTorch 2.1 on; before it, one multiplication per gradient).
void clip_gradient_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const torch::Tensor coef = (max_norm / (torch::stack(at::_foreach_norm(grads)).norm() + 1e-6)).clamp_max(1.0);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_mul_(grads, coef);
#else
  for (auto& g : grads) g.mul_(coef);
#endif
}
}  // namespace

Trainer::Trainer(Seq2Seq model, const TrainConfig& cfg, torch::Device device, const TrainOptions& opt,
                 const std::string& resume_from)
    : model_(std::move(model)),
      cfg_(cfg),
      device_(device),
      opt_(opt),
      optim_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {  // the model is on its device already
  Distributed* dist = opt_.dist;
  const int rank = dist ? dist->rank() : 0;
  st_.lr = cfg_.lr;
  if (dist && resume_from.empty()) torch::manual_seed(mix_seed(static_cast<uint64_t>(cfg_.seed), 1000 + rank));  // own dropout
  if (!resume_from.empty()) {
    bool own_rng = true;
    st_ = load_checkpoint(resume_from, model_, &optim_, rank, &own_rng);
    spdlog::info("resumed from {} at step {} (epoch {}, batch {})", resume_from, st_.step, st_.epoch + 1, st_.batch_in_epoch);
    if (!own_rng) {
      torch::manual_seed(mix_seed(static_cast<uint64_t>(cfg_.seed) + static_cast<uint64_t>(st_.step), 1000 + rank));
      spdlog::warn("{}: no random state saved for rank {} on this device (run with fewer ranks, or on another device, before); "
                   "dropout masks start afresh",
                   resume_from, rank);
    }
    st_.finished = false;  // a resumed run continues as long as its (possibly raised) limits allow: should_stop()
  }
  if (dist) {
    // Every rank starts from rank 0's weights (same seed makes them equal already; resuming ranks read the same file).
    std::vector<torch::Tensor> state;
    for (auto& p : model_->parameters()) state.push_back(p.data());
    for (auto& b : model_->buffers()) state.push_back(b.data());
    dist->broadcast_(state);
    dist->attach_gradient_buckets(model_->parameters());
  }
  set_lr(current_lr());
  base_elapsed_ = st_.elapsed_s;
  t0_ = monotonic_s();
  model_->train();
}

bool Trainer::main_rank() const { return !opt_.dist || opt_.dist->is_main(); }

double Trainer::elapsed_s() const { return base_elapsed_ + (monotonic_s() - t0_); }

// Warm-up (lr_schedule.warmup = w): update k (from 1) runs at lr * k / w until k = w. It depends on the update count
// alone, so a resumed run goes on with the same rates; plateau and step change the rate it rises to.
double Trainer::current_lr() const {
  const int w = cfg_.lr_schedule.warmup;
  return w > 0 && st_.step < w ? st_.lr * static_cast<double>(st_.step + 1) / w : st_.lr;
}

void Trainer::set_lr(double lr) {
  for (auto& g : optim_.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
}

StepResult Trainer::step(const Batch* slice, int64_t batch_tokens, int local_signal) {
  TORCH_CHECK(batch_tokens > 0, "Trainer::step: batch_tokens must be positive, got ", batch_tokens);
  Distributed* dist = opt_.dist;
  if (dist) {
    dist->zero_gradients();
  } else if (kernels_on(device_)) {
    // attnmt's CPU kernels: the gradients stay allocated and are zeroed in place. Set to none, every step would
    // allocate them afresh, and the first touch of those pages costs more here than the zeroing (Bahdanau training
    // 12-26% slower in alternating bench runs).
    optim_.zero_grad();
  } else {
    // A GPU's path (and --kernels reference): set to none rather than zeroed (PyTorch's default since 2.0), so that
    // the backward hands each parameter its gradient without an add and no step launches a pass writing zeros; the
    // device's caching allocator reuses the memory.
    for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
  }
  StepResult r;
  double lv = 0;
  // Read the loss now where attnmt's CPU kernels run (a read is free there), in a data-parallel group (the ranks agree
  // on it below) and when a test injects a NaN; on a GPU, and on the CPU under --kernels reference (the GPU's path),
  // it stays on the device until the loop logs.
  const bool read_now = kernels_on(device_) || dist || opt_.test_nan_at_step > 0;
  if (slice) {
    const ScopedAttentionMaps no_maps(false);  // nobody reads a training step's weights
    torch::Tensor loss_sum = batch_loss(model_, slice->to(device_), cfg_.label_smoothing, cfg_.teacher_forcing).sum;
    (loss_sum / static_cast<double>(batch_tokens)).backward();
    if (read_now)
      lv = host_scalar<double>(loss_sum);
    else
      r.pending = loss_sum.detach().to(torch::kDouble);
  }
  if (opt_.test_nan_at_step > 0 && st_.step + 1 == opt_.test_nan_at_step) lv = std::nan("");  // fault injection for tests
  bool time_up = cfg_.max_minutes > 0 && elapsed_s() / 60.0 >= cfg_.max_minutes;
  int sig = local_signal;
  if (dist) {
    dist->allreduce_gradients();
    // One small sum carries what every rank must agree on: the batch loss, stop requests, rank 0's clock.
    torch::Tensor c = torch::tensor({lv, sig == SIGINT ? 1.0 : 0.0, sig != 0 && sig != SIGINT ? 1.0 : 0.0,
                                     main_rank() && time_up ? 1.0 : 0.0}, torch::kDouble);
    dist->allreduce_sum_(c);
    const std::vector<double> agreed = host_vector<double>(c);
    lv = agreed[0];
    sig = agreed[2] > 0 ? SIGTERM : agreed[1] > 0 ? SIGINT : 0;
    time_up = agreed[3] > 0;
  }
  if (!r.pending.defined() && !std::isfinite(lv))
    throw NonFiniteLoss("loss became " + std::string(std::isnan(lv) ? "NaN" : "infinite") + " at step " + std::to_string(st_.step + 1));
  if (cfg_.clip_norm > 0) clip_gradient_norm(model_->parameters(), cfg_.clip_norm);
  adam_step(optim_);  // LibTorch's Adam update in one pass per parameter
  ++st_.step;
  step_schedule();
  if (st_.step <= cfg_.lr_schedule.warmup) set_lr(current_lr());
  time_up_ = time_up;
  r.loss_sum = lv;
  r.signal = sig;
  r.time_up = time_up;
  return r;
}

// lr_schedule `step` (OpenNMT-py's start_decay_steps / decay_steps): the rate is multiplied by factor after update
// start and after every `every` updates from there. It depends on the update count alone, so a resumed run reduces it
// at the same updates.
void Trainer::step_schedule() {
  const LrScheduleConfig& s = cfg_.lr_schedule;
  if (s.type != "step" || st_.step < s.start || (st_.step - s.start) % s.every != 0) return;
  st_.lr = std::max(s.min_lr, st_.lr * s.factor);
  set_lr(current_lr());
  spdlog::info("learning rate reduced to {:.3g} after update {}", st_.lr, st_.step);
}

ValidationResult Trainer::validate(const RunData& data, const Config& cfg) {
  ValidationResult v;
  Distributed* dist = opt_.dist;
  if (main_rank()) v = attnmt::validate(model_, data, cfg, device_);
  if (dist) {  // the others take rank 0's figures, so that LR schedule and early stopping agree
    torch::Tensor t = torch::tensor({v.loss, v.ppl, v.bleu}, torch::kDouble);
    dist->broadcast_({t});
    const std::vector<double> f = host_vector<double>(t);
    v = {f[0], f[1], f[2]};
  }
  const bool higher_better = cfg_.early_stopping.metric == "bleu";
  const double metric = higher_better ? v.bleu : v.ppl;
  v.improved = !st_.has_best || (higher_better ? metric > st_.best_metric : metric < st_.best_metric);
  if (v.improved) {
    st_.best_metric = metric;
    st_.has_best = true;
    st_.bad_validations = 0;
    st_.plateau_bad = 0;
  } else {
    ++st_.bad_validations;
    ++st_.plateau_bad;
    if (cfg_.lr_schedule.type == "plateau" && st_.plateau_bad > cfg_.lr_schedule.patience) {
      st_.lr = std::max(cfg_.lr_schedule.min_lr, st_.lr * cfg_.lr_schedule.factor);
      set_lr(current_lr());
      st_.plateau_bad = 0;
      spdlog::info("learning rate reduced to {:.3g}", st_.lr);
    }
  }
  return v;
}

void Trainer::save(const std::vector<std::string>& paths) {
  st_.elapsed_s = elapsed_s();
  // The random state of every rank (collective: all ranks call save at the same points).
  SaveOptions so;
  so.pause_ms = opt_.test_checkpoint_pause_ms;
  if (opt_.dist) {
    so.rank_rng = opt_.dist->allgather(at::detail::getDefaultCPUGenerator().get_state());
    if (device_.is_cuda()) so.rank_rng_cuda = opt_.dist->allgather(at::globalContext().defaultGenerator(device_).get_state());
  }
  if (!main_rank()) return;
  for (const auto& p : paths) save_checkpoint(p, model_, &optim_, st_, so);
}

std::string Trainer::stop_reason() const {
  if (cfg_.early_stopping.patience > 0 && st_.bad_validations >= cfg_.early_stopping.patience) return "early stopping";
  if (time_up_) return "max_minutes";
  if (cfg_.max_steps > 0 && st_.step >= cfg_.max_steps) return "max_steps";
  if (st_.epoch >= cfg_.epochs) return "epochs";
  return "";
}

}  // namespace attnmt
