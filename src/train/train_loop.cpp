// train(): a run directory trained from a config. Everything is read first (so that bad input fails with nothing
// written), then the directory and its log are made ready, then the loop runs the Trainer's steps with progress
// lines, validations (metrics, curves, snapshots, checkpoints), stop signals and, at the end, the summary.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "common/precision.h"
#include "common/progress.h"
#include "common/runtime.h"
#include "run/run_dir.h"
#include "train/distributed.h"
#include "train/launcher.h"
#include "train/snapshots.h"
#include "train/trainer.h"
#include "viz/charts.h"

namespace attnmt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLogPattern = "[%Y-%m-%d %H:%M:%S] [%l] %v";

std::atomic<int> g_stop_signal{0};
extern "C" void on_signal(int s) { g_stop_signal.store(s); }

// SIGINT and SIGTERM ask for a graceful stop while this lives; the handlers before it come back after.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    int_ = std::signal(SIGINT, on_signal);
    term_ = std::signal(SIGTERM, on_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, int_);
    std::signal(SIGTERM, term_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*int_)(int) = SIG_DFL;
  void (*term_)(int) = SIG_DFL;
};

// The training log: lines are kept in memory until run_dir/train.log can be written, then go there too (appended on
// resume), for as long as this lives.
class TrainLog {
 public:
  TrainLog() : logger_(spdlog::default_logger()), early_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000)) {
    early_->set_pattern(kLogPattern);
    logger_->sinks().push_back(early_);
  }
  ~TrainLog() {
    detach(early_);
    detach(file_);
  }
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;
  // Appends the lines kept so far to path, then logs there.
  void to_file(const std::string& path) {
    std::string kept;
    for (const auto& l : early_->last_formatted()) kept += l;
    std::ofstream(path, std::ios::app | std::ios::binary) << kept;
    file_ = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    file_->set_pattern(kLogPattern);
    logger_->sinks().push_back(file_);
  }
  void stop_keeping() {
    detach(early_);
    early_.reset();
  }

 private:
  void detach(const std::shared_ptr<spdlog::sinks::sink>& sink) {
    if (!sink) return;
    auto& s = logger_->sinks();
    s.erase(std::remove(s.begin(), s.end(), sink), s.end());
  }
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> early_;
  std::shared_ptr<spdlog::sinks::sink> file_;
};

// A process killed while writing leaves "NAME.tmp.PID" behind; such a file is never read, only removed.
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.find(".tmp.") != std::string::npos && it->is_regular_file()) {
      std::error_code rm;
      fs::remove(it->path(), rm);
      if (!rm) spdlog::info("removed {} (left by an interrupted write)", it->path().string());
    }
  }
}

// Redraws run_dir/curves.svg from metrics.jsonl: loss, perplexity and BLEU against steps.
void write_curves(const RunDir& dir) {
  Series train_loss{"train loss", {}, {}}, valid_loss{"valid loss", {}, {}}, ppl{"valid perplexity", {}, {}},
      bleu{"valid BLEU", {}, {}};
  for (const auto& m : dir.read_metrics()) {
    const double step = static_cast<double>(m.step);
    for (Series* s : {&train_loss, &valid_loss, &ppl, &bleu}) s->x.push_back(step);
    train_loss.y.push_back(m.train_loss);
    valid_loss.y.push_back(m.valid_loss);
    ppl.y.push_back(m.valid_ppl);
    bleu.y.push_back(m.valid_bleu);
  }
  std::vector<ChartSpec> charts = {{"Loss per target token", "step", "cross-entropy (nats)", {train_loss, valid_loss}, {}},
                                   {"Validation perplexity", "step", "perplexity", {ppl}, {}},
                                   {"Validation BLEU (greedy)", "step", "BLEU", {bleu}, {}}};
  write_file_atomic(dir.curves(), chart_row_svg(charts));
}

// A stop reason with its limit, for the log: "early stopping (patience 3)", "max_minutes (4)".
std::string describe_stop(const std::string& reason, const TrainConfig& t) {
  if (reason == "early stopping") return reason + " (patience " + std::to_string(t.early_stopping.patience) + ")";
  if (reason == "max_minutes") return reason + fmt::format(" ({:g})", t.max_minutes);
  if (reason == "max_steps") return reason + " (" + std::to_string(t.max_steps) + ")";
  if (reason == "epochs") return reason + " (" + std::to_string(t.epochs) + ")";
  return reason;
}

// The run directory before training: refuses to resume nothing or to replace a run without --overwrite.
void check_run_dir(const RunDir& dir, const Config& cfg, const TrainOptions& opt, bool main_rank) {
  if (opt.resume) {
    if (!fs::is_regular_file(dir.last())) throw UsageError(dir.path() + ": nothing to resume (no last.pt)");
    if (fs::is_regular_file(dir.config())) {
      if (!same_model_and_data(config_from_json(read_json_file(dir.config())), cfg))
        throw UsageError(dir.path() + ": the config's model or data section differs from the run being resumed");
    }
  } else if (main_rank && (fs::exists(dir.config()) || fs::exists(dir.last()))) {
    if (!opt.overwrite)
      throw UsageError(dir.path() + ": already holds a run; use --resume to continue it or --overwrite to replace it");
  }
}

// The run directory made ready by the rank that writes it: made, writable and locked; cleared for --overwrite; on
// resume, trimmed to the step being resumed; with the resolved config, a new run's vocabularies and SentencePiece
// models, and train.log.
void prepare_run_dir(const RunDir& dir, const Config& cfg, const RunData& data, const TrainOptions& opt, int64_t step,
                     bool takes_lock, DirLock& lock, TrainLog& log) {
  make_dirs(dir.path());
  if (::access(dir.path().c_str(), W_OK) != 0) throw UsageError(dir.path() + ": run directory is not writable");
  if (takes_lock && !lock.held()) lock = DirLock::acquire(dir.path(), false);
  if (!opt.resume && opt.overwrite) {
    for (const auto& f : dir.training_files()) {
      std::error_code ec;
      fs::remove(f, ec);
    }
  }
  remove_stale_temporaries(dir.path());
  if (opt.resume) {
    std::error_code ec;
    fs::remove(dir.train_summary(), ec);  // written again when this training ends
    if (int dropped = dir.drop_metrics_after(step))
      spdlog::info("{}: dropped {} line(s) logged after step {}, the step being resumed", dir.metrics(), dropped, step);
    dir.drop_progress_after(step);
  }
  write_file_atomic(dir.config(), config_to_json(cfg).dump(2) + "\n");
  if (!opt.resume) {
    data.src_vocab.save(dir.src_vocab());
    data.tgt_vocab.save(dir.tgt_vocab());
    if (!data.src_spm.empty()) {
      write_file_atomic(dir.src_spm(), data.src_spm);
      write_file_atomic(dir.tgt_spm(), data.tgt_spm);
    }
  }
  log.to_file(dir.train_log());
}

// The precision a training asks for, with the switches it sets logged.
Precision training_precision(const TrainConfig& t) {
  Precision precision = Precision::kFp32;
  if (!parse_precision(t.precision, &precision)) throw UsageError("train.precision: '" + t.precision + "'");
  return precision;
}

void log_precision() {
  const PrecisionState ps = precision_state();
  spdlog::info("precision: {} (float32 products in TF32 on CUDA: {}; cuDNN: {})", ps.precision, ps.cuda_tf32 ? "yes" : "no",
               ps.cudnn_tf32 ? "yes" : "no");
}

[[noreturn]] void throw_with_checkpoint(const NonFiniteLoss& e, const RunDir& dir) {
  throw Error(std::string(e.what()) + "; last good checkpoint: " + (fs::exists(dir.last()) ? dir.last() : std::string("none")));
}

// The loop over epochs and batches, from the Trainer's position to a limit, a signal or the end.
class TrainingLoop {
 public:
  TrainingLoop(const Config& cfg, const TrainOptions& opt, const RunDir& dir, const RunData& data, Trainer& trainer,
               const torch::Device& device);
  TrainResult run();

 private:
  StepResult step(const std::vector<int64_t>& rows);
  void show_progress();
  void validate(int64_t reported_epoch);
  TrainResult stopped_by_signal(int sig);
  TrainResult finish();
  double window_loss();
  double window_rate() const;
  double steps_per_s() const;
  std::string time_left() const;
  void warn_if_schedule_misfits_budget();
  std::string comm_note() const;

  const Config& cfg_;
  const TrainConfig& t_;
  const RunDir& dir_;
  const RunData& data_;
  Trainer& trainer_;
  TrainerState& st_;
  const torch::Device device_;
  Distributed* dist_;
  const bool main_rank_, tty_;
  AttentionSnapshots snapshots_;
  TrainResult result_;
  // Since the last validation: the loss (read, and summed on the device while not read: StepResult::pending),
  // target tokens, the window's start.
  double window_loss_ = 0, window_t_;
  torch::Tensor window_pending_;
  int64_t window_tokens_ = 0;
  double last_progress_ = 0;
  int64_t last_validated_, per_epoch_ = 1;
  bool decay_warned_ = false;
  const int64_t first_step_;
  const double loop_start_;
};

TrainingLoop::TrainingLoop(const Config& cfg, const TrainOptions& opt, const RunDir& dir, const RunData& data,
                           Trainer& trainer, const torch::Device& device)
    : cfg_(cfg),
      t_(cfg.train),
      dir_(dir),
      data_(data),
      trainer_(trainer),
      st_(trainer.state()),
      device_(device),
      dist_(opt.dist),
      main_rank_(trainer.main_rank()),
      tty_(main_rank_ && ::isatty(STDERR_FILENO) != 0),
      snapshots_(data, main_rank_ ? cfg.train.snapshot_sentences : 0),
      window_t_(monotonic_s()),
      last_validated_(opt.resume ? trainer.state().step : -1),
      first_step_(trainer.state().step),
      loop_start_(monotonic_s()) {
  const auto first = make_batch_plan(data.train, t_.batch_size, static_cast<uint64_t>(t_.seed), 0, true, 50, t_.batch_tokens);
  spdlog::info("first epoch: {} batches ({:.1f} sentences each on average{}), padding fraction {:.3f}", first.size(),
               first.empty() ? 0.0 : static_cast<double>(data.train.size()) / static_cast<double>(first.size()),
               t_.batch_tokens > 0 ? ", at most " + std::to_string(t_.batch_tokens) + " target tokens" : std::string(),
               padding_fraction(data.train, first));
}

TrainResult TrainingLoop::run() {
  while (!trainer_.should_stop()) {
    const auto plan = make_batch_plan(data_.train, t_.batch_size, static_cast<uint64_t>(t_.seed), st_.epoch, true, 50,
                                      t_.batch_tokens);
    per_epoch_ = static_cast<int64_t>(plan.size());
    while (st_.batch_in_epoch < per_epoch_) {
      const StepResult sr = step(plan[static_cast<size_t>(st_.batch_in_epoch)]);
      show_progress();
      const bool at_epoch_end = st_.batch_in_epoch == per_epoch_;
      if (at_epoch_end) {  // move the position to the next epoch before any checkpoint
        ++st_.epoch;
        st_.batch_in_epoch = 0;
      }
      const int64_t reported_epoch = at_epoch_end ? st_.epoch - 1 : st_.epoch;  // the epoch the step belongs to
      if (at_epoch_end || (t_.valid_every > 0 && st_.step % t_.valid_every == 0)) validate(reported_epoch);
      const bool stop = trainer_.should_stop();
      if (stop && last_validated_ != st_.step) validate(reported_epoch);  // every run ends with a validation (and best.pt)
      // One process also stops for a signal that came during validation.
      const int sig = dist_ ? sr.signal : g_stop_signal.load();
      if (sig != 0) return stopped_by_signal(sig);
      if (stop || at_epoch_end) break;
    }
  }
  return finish();
}

// One update on a batch (this rank's slice of it), added to the window.
StepResult TrainingLoop::step(const std::vector<int64_t>& rows) {
  int64_t batch_tokens = 0;  // target tokens of the whole batch, <eos> included
  for (int64_t i : rows) batch_tokens += static_cast<int64_t>(data_.train[static_cast<size_t>(i)].tgt.size()) + 1;
  const std::vector<int64_t> mine = dist_ ? shard_rows(rows, dist_->rank(), dist_->world()) : rows;
  std::optional<Batch> slice;
  if (!mine.empty()) slice = make_batch(data_.train, mine);  // a batch with fewer rows than ranks leaves some ranks without one
  StepResult sr;
  try {
    sr = trainer_.step(slice ? &*slice : nullptr, batch_tokens, g_stop_signal.load());
  } catch (const NonFiniteLoss& e) {
    throw_with_checkpoint(e, dir_);
  }
  ++st_.batch_in_epoch;
  window_loss_ += sr.loss_sum;
  if (sr.pending.defined()) window_pending_ = window_pending_.defined() ? window_pending_ + sr.pending : sr.pending;
  window_tokens_ += batch_tokens;
  st_.target_tokens += batch_tokens;
  return sr;
}

// A progress line redrawn on a terminal, or a log line every log_every steps.
void TrainingLoop::show_progress() {
  // The loss is read only when shown: on a GPU a read waits for the step.
  auto loss = [&] { return window_loss() / std::max<double>(1.0, static_cast<double>(window_tokens_)); };
  const double now = monotonic_s();
  if (tty_ && now - last_progress_ > 0.25) {
    std::fprintf(stderr, "\r\033[Kepoch %lld %3d%%  step %lld  loss %.4f  %.0f tok/s  %s left", static_cast<long long>(st_.epoch + 1),
                 static_cast<int>(100 * st_.batch_in_epoch / std::max<int64_t>(1, per_epoch_)), static_cast<long long>(st_.step),
                 loss(), window_rate(), time_left().c_str());
    last_progress_ = now;
  } else if (!tty_ && st_.step % t_.log_every == 0) {
    spdlog::info("epoch {} step {} ({}/{}) loss {:.4f} {:.0f} tok/s{}", st_.epoch + 1, st_.step, st_.batch_in_epoch,
                 per_epoch_, loss(), window_rate(), comm_note());
  }
}

// Validation at the current step: figures, metrics.jsonl, curves, snapshots, best.pt and last.pt (and a periodic
// checkpoint), early stopping; the window starts again.
void TrainingLoop::validate(int64_t reported_epoch) {
  const double started = monotonic_s();
  ValidationResult v = trainer_.validate(data_, cfg_);
  MetricsRecord m;
  m.step = st_.step;
  m.epoch = reported_epoch + 1;
  m.train_loss = window_tokens_ > 0 ? window_loss() / static_cast<double>(window_tokens_) : 0.0;
  m.valid_loss = v.loss;
  m.valid_ppl = v.ppl;
  m.valid_bleu = v.bleu;
  m.lr = trainer_.current_lr();
  m.tokens_per_s = window_rate();
  m.elapsed_s = trainer_.elapsed_s();
  m.world_size = dist_ ? dist_->world() : 1;
  result_.validations.push_back(v);
  if (main_rank_) {
    dir_.append_metrics(m);
    write_curves(dir_);
    snapshots_.write(trainer_.model(), dir_, st_.step, m.epoch, v.bleu, device_);
    if (tty_) std::fprintf(stderr, "\r\033[K");
    spdlog::info("validation at step {} (epoch {}): train loss {:.4f}, valid loss {:.4f}, ppl {:.2f}, BLEU {:.2f}{}", st_.step,
                 m.epoch, m.train_loss, v.loss, v.ppl, v.bleu, v.improved ? " (best)" : "");
    warn_if_schedule_misfits_budget();
  }
  std::vector<std::string> paths;
  if (v.improved) paths.push_back(dir_.best());
  paths.push_back(dir_.last());
  if (t_.keep_checkpoints > 0) {
    // Make room first, so that a kill at any moment leaves at most `keep` of them.
    if (main_rank_) dir_.prune_periodic_checkpoints(t_.keep_checkpoints - 1);
    paths.push_back(dir_.periodic_checkpoint(st_.step));
  }
  // The checkpoint records the time up to its writing (as elapsed_s does); the writing itself is added after.
  st_.valid_s += monotonic_s() - started;
  st_.peak_rss_mb = std::max(st_.peak_rss_mb, peak_rss_mb());
  const double writing = monotonic_s();
  trainer_.save(paths);
  st_.valid_s += monotonic_s() - writing;
  window_loss_ = 0;
  window_pending_ = torch::Tensor();
  window_tokens_ = 0;
  window_t_ = monotonic_s();
  last_validated_ = st_.step;
  if (t_.early_stopping.patience > 0 && st_.bad_validations >= t_.early_stopping.patience)
    spdlog::info("early stopping: {} validations without improvement on validation {}", st_.bad_validations,
                 t_.early_stopping.metric);
}

TrainResult TrainingLoop::stopped_by_signal(int sig) {
  trainer_.save({dir_.last()});
  if (main_rank_) spdlog::warn("stopped by signal {} at step {}; resume with --resume ({} written)", sig, st_.step, dir_.last());
  result_.state = st_;
  result_.exit_code = 128 + sig;
  result_.ended_by = "signal";
  return result_;
}

TrainResult TrainingLoop::finish() {
  st_.finished = true;
  trainer_.save({dir_.last()});
  result_.ended_by = trainer_.stop_reason();
  st_.peak_rss_mb = std::max(st_.peak_rss_mb, peak_rss_mb());
  TrainSummary ts;
  ts.ended_by = result_.ended_by;
  ts.step = st_.step;
  ts.epochs = static_cast<double>(st_.epoch) + static_cast<double>(st_.batch_in_epoch) / std::max<double>(1.0, static_cast<double>(per_epoch_));
  ts.elapsed_s = st_.elapsed_s;
  ts.valid_s = st_.valid_s;
  ts.target_tokens = st_.target_tokens;
  ts.peak_rss_mb = st_.peak_rss_mb;
  ts.metric = t_.early_stopping.metric;
  ts.best_metric = st_.best_metric;
  spdlog::info("training done at step {} ({:.1f} s), ended by {}; best {} {:.3f}; checkpoints {} and {}{}", st_.step,
               st_.elapsed_s, describe_stop(result_.ended_by, t_), t_.early_stopping.metric, st_.best_metric, dir_.best(),
               dir_.last(), comm_note());
  spdlog::info("whole run: {} target tokens in {:.1f} s of training ({:.0f} tokens/s; validation {:.1f} s more), peak memory {:.0f} MiB{}",
               ts.target_tokens, ts.train_s(), ts.tokens_per_s(), ts.valid_s, ts.peak_rss_mb, dist_ ? " (rank 0)" : "");
  if (main_rank_) dir_.write_train_summary(ts);
  result_.state = st_;
  return result_;
}

// The window's loss summed over its target tokens, with what is still on the device read now.
double TrainingLoop::window_loss() {
  if (window_pending_.defined()) {
    try {
      window_loss_ += read_loss(window_pending_, st_.step);
    } catch (const NonFiniteLoss& e) {
      throw_with_checkpoint(e, dir_);
    }
    window_pending_ = torch::Tensor();
  }
  return window_loss_;
}

double TrainingLoop::window_rate() const {
  return static_cast<double>(window_tokens_) / std::max(1e-9, monotonic_s() - window_t_);
}

// Updates per second since this process's loop began (validations included): the pace both estimates below use.
double TrainingLoop::steps_per_s() const {
  return static_cast<double>(st_.step - first_step_) / std::max(1e-9, monotonic_s() - loop_start_);
}

// Time to the end of training at this process's pace (validations included): epochs, max_steps or max_minutes,
// whichever ends it first.
std::string TrainingLoop::time_left() const {
  const double rate = steps_per_s();
  double steps = static_cast<double>((t_.epochs - st_.epoch) * per_epoch_ - st_.batch_in_epoch);
  if (t_.max_steps > 0) steps = std::min(steps, static_cast<double>(t_.max_steps - st_.step));
  double left = rate > 0 ? steps / rate : std::numeric_limits<double>::infinity();
  if (t_.max_minutes > 0) left = std::min(left, t_.max_minutes * 60 - trainer_.elapsed_s());
  return format_duration(std::max(0.0, left));
}

// A step schedule counts updates and a time budget counts minutes, so a schedule fitted to one machine's pace misfits
// another's: on a slower machine the first reduction may never come (docs/multi30k.md, runs 22-24: 4,400 updates
// fitted to 50 minutes on a machine that made 6,400, where 50 minutes hold 3,200); on a faster one the rate may be
// annealed to almost nothing in the budget's first part, which then trains on at that rate (runs 39-42: a schedule
// fitted to 2,700 updates on a machine that makes 13,000). Said once, at the first validation whose pace shows either;
// the schedule itself is not changed, so that the same seed still gives the same numbers.
void TrainingLoop::warn_if_schedule_misfits_budget() {
  const LrScheduleConfig& s = t_.lr_schedule;
  if (decay_warned_ || s.type != "step" || t_.max_minutes <= 0 || st_.step <= first_step_) return;
  const double end = static_cast<double>(st_.step) + steps_per_s() * std::max(0.0, t_.max_minutes * 60 - trainer_.elapsed_s());
  if (t_.max_steps > 0 && t_.max_steps <= end) return;  // max_steps ends the run first: the budget's pace says nothing
  if (st_.step < s.start && end < s.start) {
    decay_warned_ = true;
    spdlog::warn("train.lr_schedule.start is {}, but at this pace the {:g}-minute budget ends near update {:.0f}, so the "
                 "step decay would never reduce the rate; about {:.0f} (two thirds of the updates) fits this machine",
                 s.start, t_.max_minutes, end, 2.0 * end / 3.0);
    return;
  }
  // The update after which the decay has brought the rate to 1/64 of train.lr (six halvings at factor 0.5), or to its
  // floor min_lr if that comes first: from there on the updates barely move the model.
  const double to_64th = std::ceil(std::log(1.0 / 64) / std::log(s.factor));
  const double to_floor = s.min_lr > 0 ? std::ceil(std::log(s.min_lr / t_.lr) / std::log(s.factor)) : to_64th;
  const double reductions = std::min(to_64th, to_floor);
  if (reductions < 1) return;  // min_lr at or above train.lr: the decay never reduces the rate
  const double first = s.start > 0 ? s.start : s.every;
  const double spent = first + (reductions - 1) * s.every;
  if (spent >= end / 2) return;
  decay_warned_ = true;
  const double low = std::max(s.min_lr, t_.lr * std::pow(s.factor, reductions));
  spdlog::warn("train.lr_schedule brings the rate down to {:.3g} (train.lr {:g}) by update {:.0f}, but at this pace the "
               "{:g}-minute budget ends near update {:.0f}, so more than half of it would train at that rate; a start of "
               "about {:.0f} (two thirds of the updates) fits this machine, or type 'plateau', which follows validation",
               low, t_.lr, spent, t_.max_minutes, end, 2.0 * end / 3.0);
}

std::string TrainingLoop::comm_note() const {
  if (!dist_ || dist_->stats().gradient_allreduces == 0) return "";
  const auto& cs = dist_->stats();
  return fmt::format(", gradient all-reduce {:.1f} ms/step", 1e3 * cs.gradient_seconds / static_cast<double>(cs.gradient_allreduces));
}

}  // namespace

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }

TrainResult train(const Config& cfg, const TrainOptions& opt, const torch::Device& device) {
  const RunDir dir(cfg.run_dir);
  const bool main_rank = !opt.dist || opt.dist->is_main();  // the rank that validates, logs and writes run_dir
  // One writer per run directory, for as long as this training runs; taken before anything is read so that a second
  // writer is refused at once. A new directory is locked when it is made. The local launcher of --nproc holds it for
  // its workers.
  const bool takes_lock = main_rank && !env_var(kLocalWorkerEnv);
  DirLock lock;
  if (takes_lock && fs::is_directory(dir.path())) lock = DirLock::acquire(dir.path(), false);
  check_run_dir(dir, cfg, opt, main_rank);
  // Read everything (corpus, vocabularies, checkpoint) before touching the run directory: bad input then fails with
  // nothing written, and --overwrite does not destroy a run before the new one can start.
  TrainLog log;
  RunData data = prepare_data(cfg, opt.resume);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  Seq2Seq model(cfg.model, data.src_vocab.size(), data.tgt_vocab.size());
  model->to(device);
  spdlog::info("model: {}; {} parameters, device {}", describe_model(cfg.model), model->parameter_count(), device.str());
  const ScopedPrecision precision_scope(training_precision(cfg.train));  // for this training only: TF32, bf16 autocast
  log_precision();
  Trainer trainer(model, cfg.train, device, opt, opt.resume ? dir.last() : "");
  if (opt.dist)
    spdlog::info("data-parallel: rank {} of {} ({}), {} gradient bucket(s) of {:.1f} MB in all", opt.dist->rank(),
                 opt.dist->world(), opt.dist->backend(), opt.dist->stats().buckets, opt.dist->stats().gradient_bytes / 1e6);
  if (main_rank) prepare_run_dir(dir, cfg, data, opt, trainer.state().step, takes_lock, lock, log);
  log.stop_keeping();
  TrainingLoop loop(cfg, opt, dir, data, trainer, device);
  const StopSignals signals;
  return loop.run();
}

}  // namespace attnmt
