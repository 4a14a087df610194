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
#include "data/text.h"
#include "common/random.h"
#include "eval/bleu.h"
#include "eval/run_dir.h"
#include "eval/search.h"
#include "train/distributed.h"
#include "train/launcher.h"
#include "kernels/adam.h"
#include "kernels/mode.h"
#include "model/attention.h"
#include "train/snapshots.h"
#include "viz/charts.h"

namespace attnmt {

namespace fs = std::filesystem;

namespace {
std::atomic<int> g_stop_signal{0};
extern "C" void on_signal(int s) { g_stop_signal.store(s); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<EncodedPair> encode_all(const TokenizedCorpus& c, const Vocab& sv, const Vocab& tv) {
  std::vector<EncodedPair> out;
  out.reserve(c.examples.size());
  for (const auto& e : c.examples) out.push_back({sv.encode(e.src), tv.encode(e.tgt)});
  return out;
}

void log_filter(const std::string& name, const FilterStats& s, int max_len) {
  spdlog::info("{}: {} pairs read, {} kept, {} dropped as empty, {} dropped as longer than {} tokens", name, s.read,
               s.kept, s.dropped_empty, s.dropped_long, max_len);
}

// The SentencePiece models of a new run: the user's files, or trained on the training split
// (both sides together for a joint model), lowercased when the run lowercases.
void make_sentencepiece_models(const Config& cfg, const ParallelText& train_text, RunData& d) {
  const SpmConfig& spm = cfg.data.spm;
  if (!spm.src_model.empty()) {
    d.src_spm = read_sentencepiece_model(spm.src_model);
    d.tgt_spm = read_sentencepiece_model(spm.tgt_model);
    spdlog::info("SentencePiece models: {} and {}", spm.src_model, spm.tgt_model);
    return;
  }
  const SpmTrainOptions o{spm.vocab_size, spm.model_type, spm.character_coverage};
  auto prepared = [&](const std::vector<std::string>& lines) {
    if (!cfg.data.lowercase) return lines;
    std::vector<std::string> out;
    out.reserve(lines.size());
    for (const auto& l : lines) out.push_back(to_lower_utf8(l));
    return out;
  };
  const std::string what = config_key(cfg, &spm.vocab_size);
  if (spm.joint) {
    std::vector<std::string> both = prepared(train_text.src);
    for (auto& l : prepared(train_text.tgt)) both.push_back(std::move(l));
    d.src_spm = d.tgt_spm = train_sentencepiece(both, o, what);
  } else {
    d.src_spm = train_sentencepiece(prepared(train_text.src), o, what + " (source)");
    d.tgt_spm = train_sentencepiece(prepared(train_text.tgt), o, what + " (target)");
  }
  spdlog::info("SentencePiece: trained {} of {} pieces on {} training lines",
               spm.joint ? "one joint " + spm.model_type + " model" : "two " + spm.model_type + " models", spm.vocab_size,
               train_text.src.size());
}

RunData prepare_data(const Config& cfg, bool load_vocab) {
  RunData d;
  const RunDir dir(cfg.run_dir);
  ParallelText train_text = read_split(cfg.data.train, config_split_path(cfg, cfg.data.train));
  ParallelText valid_text = read_split(cfg.data.valid, config_split_path(cfg, cfg.data.valid));
  if (cfg.data.tokenizer != "sentencepiece") {
    d.tok = Tokenizer::from_config(cfg.data, "", "");
  } else if (load_vocab) {  // resume: the run's own models, never retrained
    d.tok = Tokenizer::from_config(cfg.data, dir.src_spm(), dir.tgt_spm());
  } else {
    make_sentencepiece_models(cfg, train_text, d);
    d.tok = Tokenizer::pieces(d.src_spm, d.tgt_spm, cfg.data.lowercase, cfg.data.spm.src_model, cfg.data.spm.tgt_model);
  }
  TokenizedCorpus tr = tokenize_corpus(train_text, d.tok, cfg.data.max_len);
  TokenizedCorpus va = tokenize_corpus(valid_text, d.tok, cfg.data.max_len);
  log_filter("train", tr.stats, cfg.data.max_len);
  log_filter("valid", va.stats, cfg.data.max_len);
  if (load_vocab) {
    d.src_vocab = Vocab::load(cfg.run_dir + "/src.vocab");
    d.tgt_vocab = Vocab::load(cfg.run_dir + "/tgt.vocab");
  } else {
    std::vector<std::vector<std::string>> s, t;
    for (auto& e : tr.examples) {
      s.push_back(e.src);
      t.push_back(e.tgt);
    }
    if (d.tok.subword()) {  // every piece the training split uses: a rare piece must not become <unk>
      d.src_vocab = Vocab::build(s, 1, 0);
      d.tgt_vocab = Vocab::build(t, 1, 0);
    } else {
      d.src_vocab = Vocab::build(s, cfg.data.src_vocab.min_freq, cfg.data.src_vocab.max_size);
      d.tgt_vocab = Vocab::build(t, cfg.data.tgt_vocab.min_freq, cfg.data.tgt_vocab.max_size);
    }
  }
  spdlog::info("vocabularies: source {} types, target {} types", d.src_vocab.size(), d.tgt_vocab.size());
  d.train = encode_all(tr, d.src_vocab, d.tgt_vocab);
  d.valid = encode_all(va, d.src_vocab, d.tgt_vocab);
  for (const auto& e : va.examples) {
    std::string ref = valid_text.tgt[static_cast<size_t>(e.line)];
    d.valid_refs.push_back(cfg.data.lowercase ? to_lower_utf8(ref) : ref);
  }
  return d;
}

constexpr const char* kLogPattern = "[%Y-%m-%d %H:%M:%S] [%l] %v";

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

// Detaches a sink when it goes out of scope (not copyable: a copy's destructor would detach it early).
struct RemoveSink {
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<spdlog::sinks::sink> sink;
  RemoveSink(std::shared_ptr<spdlog::logger> l, std::shared_ptr<spdlog::sinks::sink> s) : logger(std::move(l)), sink(std::move(s)) {}
  RemoveSink(const RemoveSink&) = delete;
  RemoveSink& operator=(const RemoveSink&) = delete;
  ~RemoveSink() {
    auto& s = logger->sinks();
    s.erase(std::remove(s.begin(), s.end(), sink), s.end());
  }
};

}  // namespace

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }

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
  set_lr(st_.lr);
  base_elapsed_ = st_.elapsed_s;
  t0_ = now_s();
  model_->train();
}

bool Trainer::main_rank() const { return !opt_.dist || opt_.dist->is_main(); }

double Trainer::elapsed_s() const { return base_elapsed_ + (now_s() - t0_); }

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
  time_up_ = time_up;
  r.loss_sum = lv;
  r.signal = sig;
  r.time_up = time_up;
  return r;
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
      set_lr(st_.lr);
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

namespace {

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

}  // namespace

TrainResult train(const Config& cfg, const TrainOptions& opt, const torch::Device& device) {
  const RunDir dir(cfg.run_dir);
  const nlohmann::json resolved = config_to_json(cfg);
  Distributed* dist = opt.dist;
  const bool main_rank = !dist || dist->is_main();  // the rank that validates, logs and writes run_dir
  // One writer per run directory, for as long as this training runs; taken before anything is read so that a second
  // writer is refused at once. A new directory is locked when it is made, below. The local launcher of --nproc holds
  // it for its workers.
  const bool takes_lock = main_rank && !std::getenv(kLocalWorkerEnv);
  DirLock lock;
  if (takes_lock && fs::is_directory(dir.path())) lock = DirLock::acquire(dir.path(), false);
  check_run_dir(dir, cfg, opt, main_rank);
  // Read everything (corpus, vocabularies, checkpoint) before touching the run directory: bad input
  // then fails with nothing written, and --overwrite does not destroy a run before the new one can start.
  // Log lines until then are kept and copied into train.log once it exists.
  auto early = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000);
  early->set_pattern(kLogPattern);
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(early);
  auto remove_early = std::make_unique<RemoveSink>(logger, early);

  RunData data = prepare_data(cfg, opt.resume);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  Seq2Seq model(cfg.model, data.src_vocab.size(), data.tgt_vocab.size());
  model->to(device);
  spdlog::info("model: {}; {} parameters, device {}", describe_model(cfg.model), model->parameter_count(), device.str());
  Precision precision = Precision::kFp32;
  if (!parse_precision(cfg.train.precision, &precision)) throw UsageError("train.precision: '" + cfg.train.precision + "'");
  const ScopedPrecision precision_scope(precision);  // for this training only: the TF32 switches, bf16 autocast
  const PrecisionState ps = precision_state();
  spdlog::info("precision: {} (float32 products in TF32 on CUDA: {}; cuDNN: {})", ps.precision, ps.cuda_tf32 ? "yes" : "no",
               ps.cudnn_tf32 ? "yes" : "no");
  Trainer trainer(model, cfg.train, device, opt, opt.resume ? dir.last() : "");
  TrainerState& st = trainer.state();
  if (dist)
    spdlog::info("data-parallel: rank {} of {} ({}), {} gradient bucket(s) of {:.1f} MB in all", dist->rank(), dist->world(),
                 dist->backend(), dist->stats().buckets, dist->stats().gradient_bytes / 1e6);

  std::optional<RemoveSink> remove_sink;
  if (main_rank) {
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
      if (int dropped = dir.drop_metrics_after(st.step))
        spdlog::info("{}: dropped {} line(s) logged after step {}, the step being resumed", dir.metrics(), dropped, st.step);
      dir.drop_progress_after(st.step);
    }
    write_file_atomic(dir.config(), resolved.dump(2) + "\n");
    if (!opt.resume) {
      data.src_vocab.save(dir.src_vocab());
      data.tgt_vocab.save(dir.tgt_vocab());
      if (!data.src_spm.empty()) {
        write_file_atomic(dir.src_spm(), data.src_spm);
        write_file_atomic(dir.tgt_spm(), data.tgt_spm);
      }
    }
    // Everything logged from here on also goes to run_dir/train.log (appended on resume).
    {
      std::string early_lines;
      for (const auto& l : early->last_formatted()) early_lines += l;
      std::ofstream(dir.train_log(), std::ios::app | std::ios::binary) << early_lines;
    }
    auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir.train_log(), false);
    file_sink->set_pattern(kLogPattern);
    logger->sinks().push_back(file_sink);
    remove_sink.emplace(logger, file_sink);
  }
  remove_early.reset();

  AttentionSnapshots snapshots(data, main_rank ? cfg.train.snapshot_sentences : 0);
  {
    const auto first = make_batch_plan(data.train, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed), 0, true, 50,
                                       cfg.train.batch_tokens);
    spdlog::info("first epoch: {} batches ({:.1f} sentences each on average{}), padding fraction {:.3f}", first.size(),
                 first.empty() ? 0.0 : static_cast<double>(data.train.size()) / static_cast<double>(first.size()),
                 cfg.train.batch_tokens > 0 ? ", at most " + std::to_string(cfg.train.batch_tokens) + " target tokens" : std::string(),
                 padding_fraction(data.train, first));
  }

  g_stop_signal.store(0);
  auto old_int = std::signal(SIGINT, on_signal);
  auto old_term = std::signal(SIGTERM, on_signal);
  struct Restore {
    decltype(old_int) i, t;
    ~Restore() {
      std::signal(SIGINT, i);
      std::signal(SIGTERM, t);
    }
  } restore{old_int, old_term};

  TrainResult result;
  double window_loss = 0, window_t = now_s();
  torch::Tensor window_pending;  // losses still on the device (see StepResult::pending)
  // The window's loss, with what is still on the device read now.
  auto window_loss_now = [&]() {
    if (window_pending.defined()) {
      try {
        window_loss += read_loss(window_pending, st.step);
      } catch (const NonFiniteLoss& e) {
        throw Error(std::string(e.what()) + "; last good checkpoint: " + (fs::exists(dir.last()) ? dir.last() : std::string("none")));
      }
      window_pending = torch::Tensor();
    }
    return window_loss;
  };
  int64_t window_tokens = 0;
  const bool tty = main_rank && ::isatty(STDERR_FILENO) != 0;
  auto comm_note = [&]() -> std::string {
    if (!dist || dist->stats().gradient_allreduces == 0) return "";
    const auto& cs = dist->stats();
    return fmt::format(", gradient all-reduce {:.1f} ms/step", 1e3 * cs.gradient_seconds / static_cast<double>(cs.gradient_allreduces));
  };
  double last_progress = 0;

  // Validation at the current step: figures, metrics.jsonl, curves, best.pt and last.pt, early stopping.
  auto validation = [&](int64_t reported_epoch) {
    ValidationResult v = trainer.validate(data, cfg);
    MetricsRecord m;
    m.step = st.step;
    m.epoch = reported_epoch + 1;
    m.train_loss = window_tokens > 0 ? window_loss_now() / static_cast<double>(window_tokens) : 0.0;
    m.valid_loss = v.loss;
    m.valid_ppl = v.ppl;
    m.valid_bleu = v.bleu;
    m.lr = st.lr;
    m.tokens_per_s = static_cast<double>(window_tokens) / std::max(1e-9, now_s() - window_t);
    m.elapsed_s = trainer.elapsed_s();
    m.world_size = dist ? dist->world() : 1;
    result.validations.push_back(v);
    if (main_rank) {
      dir.append_metrics(m);
      write_curves(dir);
      snapshots.write(model, dir, st.step, m.epoch, v.bleu, device);
      if (tty) std::fprintf(stderr, "\r\033[K");
      spdlog::info("validation at step {} (epoch {}): train loss {:.4f}, valid loss {:.4f}, ppl {:.2f}, BLEU {:.2f}{}",
                   st.step, m.epoch, m.train_loss, v.loss, v.ppl, v.bleu, v.improved ? " (best)" : "");
    }
    std::vector<std::string> paths;
    if (v.improved) paths.push_back(dir.best());
    paths.push_back(dir.last());
    const int keep = cfg.train.keep_checkpoints;
    if (keep > 0) {
      // Make room first, so that a kill at any moment leaves at most `keep` of them.
      if (main_rank) dir.prune_periodic_checkpoints(keep - 1);
      paths.push_back(dir.periodic_checkpoint(st.step));
    }
    trainer.save(paths);
    window_loss = 0;
    window_pending = torch::Tensor();
    window_tokens = 0;
    window_t = now_s();
    if (cfg.train.early_stopping.patience > 0 && st.bad_validations >= cfg.train.early_stopping.patience)
      spdlog::info("early stopping: {} validations without improvement on validation {}", st.bad_validations,
                   cfg.train.early_stopping.metric);
  };

  int64_t last_validated = opt.resume ? st.step : -1;
  int64_t batches_per_epoch = 1;
  const int64_t first_step = st.step;
  const double loop_start = now_s();
  // Time to the end of training at this process's pace (validations included): epochs, max_steps or
  // max_minutes, whichever ends it first.
  auto time_left = [&](int64_t per_epoch) {
    const double rate = static_cast<double>(st.step - first_step) / std::max(1e-9, now_s() - loop_start);  // steps/s
    double steps = static_cast<double>((cfg.train.epochs - st.epoch) * per_epoch - st.batch_in_epoch);
    if (cfg.train.max_steps > 0) steps = std::min(steps, static_cast<double>(cfg.train.max_steps - st.step));
    double left = rate > 0 ? steps / rate : std::numeric_limits<double>::infinity();
    if (cfg.train.max_minutes > 0) left = std::min(left, cfg.train.max_minutes * 60 - trainer.elapsed_s());
    return format_duration(std::max(0.0, left));
  };
  while (!trainer.should_stop()) {
    auto plan = make_batch_plan(data.train, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed), st.epoch, true, 50,
                                cfg.train.batch_tokens);
    const int64_t per_epoch = static_cast<int64_t>(plan.size());
    batches_per_epoch = per_epoch;
    while (st.batch_in_epoch < per_epoch) {
      const auto& rows = plan[static_cast<size_t>(st.batch_in_epoch)];
      int64_t batch_tokens = 0;  // target tokens of the whole batch, <eos> included
      for (int64_t i : rows) batch_tokens += static_cast<int64_t>(data.train[static_cast<size_t>(i)].tgt.size()) + 1;
      const std::vector<int64_t> mine = dist ? shard_rows(rows, dist->rank(), dist->world()) : rows;
      std::optional<Batch> slice;
      if (!mine.empty()) slice = make_batch(data.train, mine);  // a batch with fewer rows than ranks leaves some ranks without one
      StepResult sr;
      try {
        sr = trainer.step(slice ? &*slice : nullptr, batch_tokens, g_stop_signal.load());
      } catch (const NonFiniteLoss& e) {
        throw Error(std::string(e.what()) + "; last good checkpoint: " + (fs::exists(dir.last()) ? dir.last() : std::string("none")));
      }
      ++st.batch_in_epoch;
      window_loss += sr.loss_sum;
      if (sr.pending.defined()) window_pending = window_pending.defined() ? window_pending + sr.pending : sr.pending;
      window_tokens += batch_tokens;
      const double now = now_s();
      if (tty && now - last_progress > 0.25) {
        double tps = static_cast<double>(window_tokens) / std::max(1e-9, now - window_t);
        std::fprintf(stderr, "\r\033[Kepoch %lld %3d%%  step %lld  loss %.4f  %.0f tok/s  %s left", static_cast<long long>(st.epoch + 1),
                     static_cast<int>(100 * st.batch_in_epoch / std::max<int64_t>(1, per_epoch)), static_cast<long long>(st.step),
                     window_loss_now() / std::max<double>(1.0, static_cast<double>(window_tokens)), tps, time_left(per_epoch).c_str());
        last_progress = now;
      } else if (!tty && st.step % cfg.train.log_every == 0) {
        spdlog::info("epoch {} step {} ({}/{}) loss {:.4f} {:.0f} tok/s{}", st.epoch + 1, st.step, st.batch_in_epoch,
                     per_epoch, window_loss_now() / std::max<double>(1.0, static_cast<double>(window_tokens)),
                     static_cast<double>(window_tokens) / std::max(1e-9, now - window_t), comm_note());
      }
      const bool at_epoch_end = st.batch_in_epoch == per_epoch;
      if (at_epoch_end) {  // move the position to the next epoch before any checkpoint
        ++st.epoch;
        st.batch_in_epoch = 0;
      }
      const int64_t reported_epoch = at_epoch_end ? st.epoch - 1 : st.epoch;  // the epoch the step belongs to
      if (at_epoch_end || (cfg.train.valid_every > 0 && st.step % cfg.train.valid_every == 0)) {
        validation(reported_epoch);
        last_validated = st.step;
      }
      const bool stop = trainer.should_stop();
      if (stop && last_validated != st.step) {  // every run ends with a validation (and best.pt)
        validation(reported_epoch);
        last_validated = st.step;
      }
      // One process also stops for a signal that came during validation.
      const int sig = dist ? sr.signal : g_stop_signal.load();
      if (sig != 0) {
        trainer.save({dir.last()});
        if (main_rank) spdlog::warn("stopped by signal {} at step {}; resume with --resume ({} written)", sig, st.step, dir.last());
        result.state = st;
        result.exit_code = 128 + sig;
        result.ended_by = "signal";
        return result;
      }
      if (stop || at_epoch_end) break;
    }
  }
  st.finished = true;
  trainer.save({dir.last()});
  result.ended_by = trainer.stop_reason();
  spdlog::info("training done at step {} ({:.1f} s), ended by {}; best {} {:.3f}; checkpoints {} and {}{}", st.step,
               st.elapsed_s, describe_stop(result.ended_by, cfg.train), cfg.train.early_stopping.metric, st.best_metric,
               dir.best(), dir.last(), comm_note());
  if (main_rank) {
    TrainSummary ts;
    ts.ended_by = result.ended_by;
    ts.step = st.step;
    ts.epochs = static_cast<double>(st.epoch) + static_cast<double>(st.batch_in_epoch) / std::max<double>(1.0, static_cast<double>(batches_per_epoch));
    ts.elapsed_s = st.elapsed_s;
    ts.metric = cfg.train.early_stopping.metric;
    ts.best_metric = st.best_metric;
    dir.write_train_summary(ts);
  }
  result.state = st;
  return result;
}

}  // namespace attnmt
