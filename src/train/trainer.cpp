#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "data/text.h"
#include "eval/bleu.h"
#include "eval/search.h"
#include "train/distributed.h"
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

RunData prepare_data(const Config& cfg, bool load_vocab) {
  RunData d;
  TokenizerKind kind = tokenizer_from_string(cfg.data.tokenizer);
  ParallelText train_text = read_split(cfg.data.train, "train");
  ParallelText valid_text = read_split(cfg.data.valid, "valid");
  TokenizedCorpus tr = tokenize_corpus(train_text, kind, cfg.data.lowercase, cfg.data.max_len);
  TokenizedCorpus va = tokenize_corpus(valid_text, kind, cfg.data.lowercase, cfg.data.max_len);
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
    d.src_vocab = Vocab::build(s, cfg.data.src_vocab.min_freq, cfg.data.src_vocab.max_size);
    d.tgt_vocab = Vocab::build(t, cfg.data.tgt_vocab.min_freq, cfg.data.tgt_vocab.max_size);
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

void append_line(const std::string& path, const std::string& line) {
  // One write() of a whole line: a kill leaves either the full line or none of it (O_APPEND).
  std::string l = line + "\n";
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw Error(path + ": cannot open for appending");
  size_t w = std::fwrite(l.data(), 1, l.size(), f);
  int rc = std::fclose(f);
  if (w != l.size() || rc != 0) throw Error(path + ": write failed (disk full?)");
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

// On resume, validations logged after the checkpoint being resumed (a kill between the metrics line and the
// checkpoint) are dropped, so that the resumed run's lines follow on without repeats.
void drop_metrics_after(const std::string& path, int64_t step) {
  if (!fs::is_regular_file(path)) return;
  std::ifstream in(path, std::ios::binary);
  std::string line, kept;
  int dropped = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (dropped == 0) return;
  write_file_atomic(path, kept);
  spdlog::info("{}: dropped {} line(s) logged after step {}, the step being resumed", path, dropped, step);
}

// Redraws run_dir/curves.svg from metrics.jsonl: loss, perplexity and BLEU against steps.
void write_curves(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  Series train_loss{"train loss", {}, {}}, valid_loss{"valid loss", {}, {}}, ppl{"valid perplexity", {}, {}},
      bleu{"valid BLEU", {}, {}};
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    double step = j["step"].get<double>();
    train_loss.x.push_back(step);
    train_loss.y.push_back(j.value("train_loss", 0.0));
    valid_loss.x.push_back(step);
    valid_loss.y.push_back(j.value("valid_loss", 0.0));
    ppl.x.push_back(step);
    ppl.y.push_back(j.value("valid_ppl", 0.0));
    bleu.x.push_back(step);
    bleu.y.push_back(j.value("valid_bleu", 0.0));
  }
  std::vector<ChartSpec> charts = {{"Loss per target token", "step", "cross-entropy (nats)", {train_loss, valid_loss}, {}},
                                   {"Validation perplexity", "step", "perplexity", {ppl}, {}},
                                   {"Validation BLEU (greedy)", "step", "BLEU", {bleu}, {}}};
  write_file_atomic(dir + "/curves.svg", chart_row_svg(charts));
}

}  // namespace

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }

double accumulate_gradients(Seq2Seq& model, const Batch& b, int64_t batch_tokens, double label_smoothing,
                            double teacher_forcing) {
  TORCH_CHECK(batch_tokens > 0, "accumulate_gradients: batch_tokens must be positive, got ", batch_tokens);
  torch::Tensor loss_sum = batch_loss(model, b, label_smoothing, teacher_forcing).sum;
  (loss_sum / static_cast<double>(batch_tokens)).backward();
  return loss_sum.item<double>();
}

void apply_update(Seq2Seq& model, torch::optim::Optimizer& optim, double clip_norm) {
  if (clip_norm > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), clip_norm);
  optim.step();
}

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
  double loss_sum = 0;
  int64_t tokens = 0;
  auto plan = make_batch_plan(data.valid, cfg.eval.batch_size, 0, 0, false);
  std::vector<std::string> hyps(data.valid.size());
  TokenizerKind kind = tokenizer_from_string(cfg.data.tokenizer);
  SearchOptions so;
  so.max_len_ratio = cfg.eval.max_len_ratio;
  for (const auto& idx : plan) {
    Batch b = make_batch(data.valid, idx);
    Batch db = b.to(device);
    loss_sum += batch_loss(model, db, 0.0).sum.item<double>();
    tokens += b.tgt_tokens;
    auto hs = greedy_search(model, b, so, device);
    for (size_t k = 0; k < idx.size(); ++k)
      hyps[static_cast<size_t>(idx[k])] = detokenize(data.tgt_vocab.decode(hs[k].tokens), kind);
  }
  r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
  r.ppl = std::exp(std::min(r.loss, 100.0));
  r.bleu = corpus_bleu(hyps, {data.valid_refs}).score;
  model->train();
  return r;
}

TrainResult train(const Config& cfg, const TrainOptions& opt, const torch::Device& device) {
  const std::string dir = cfg.run_dir;
  const std::string last = dir + "/last.pt", best = dir + "/best.pt", cfg_path = dir + "/config.json";
  nlohmann::json resolved = config_to_json(cfg);
  Distributed* dist = opt.dist;
  const bool main_rank = !dist || dist->is_main();  // the rank that validates, logs and writes run_dir
  const int rank = dist ? dist->rank() : 0, world = dist ? dist->world() : 1;
  if (opt.resume) {
    if (!fs::is_regular_file(last)) throw UsageError(dir + ": nothing to resume (no last.pt)");
    if (fs::is_regular_file(cfg_path)) {
      Config old = config_from_json(read_json_file(cfg_path));
      nlohmann::json a = config_to_json(old), b = resolved;
      if (a["model"] != b["model"] || a["data"] != b["data"])
        throw UsageError(dir + ": the config's model or data section differs from the run being resumed");
    }
  } else if (main_rank && (fs::exists(cfg_path) || fs::exists(last))) {
    if (!opt.overwrite)
      throw UsageError(dir + ": already holds a run; use --resume to continue it or --overwrite to replace it");
  }
  // Read everything (corpus, vocabularies, checkpoint) before touching the run directory: bad input
  // then fails with nothing written, and --overwrite does not destroy a run before the new one can start.
  // Log lines until then are kept and copied into train.log once it exists.
  auto early = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000);
  early->set_pattern(kLogPattern);
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(early);
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
  auto remove_early = std::make_unique<RemoveSink>(logger, early);

  RunData data = prepare_data(cfg, opt.resume);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  Seq2Seq model(cfg.model, data.src_vocab.size(), data.tgt_vocab.size());
  model->to(device);
  torch::optim::Adam optim(model->parameters(), torch::optim::AdamOptions(cfg.train.lr));  // after moving the model
  spdlog::info("model: {} attention, {} parameters, device {}", cfg.model.attention.type, model->parameter_count(),
               device.str());
  TrainerState st;
  st.lr = cfg.train.lr;
  if (dist && !opt.resume) torch::manual_seed(mix_seed(static_cast<uint64_t>(cfg.train.seed), 1000 + rank));  // own dropout
  if (opt.resume) {
    bool own_rng = true;
    st = load_checkpoint(last, model, &optim, rank, &own_rng);
    spdlog::info("resumed from {} at step {} (epoch {}, batch {})", last, st.step, st.epoch + 1, st.batch_in_epoch);
    if (!own_rng) {
      torch::manual_seed(mix_seed(static_cast<uint64_t>(cfg.train.seed) + static_cast<uint64_t>(st.step), 1000 + rank));
      spdlog::warn("{}: no random state saved for rank {} (run with fewer ranks before); dropout masks start afresh", last, rank);
    }
  }
  if (dist) {
    // Every rank starts from rank 0's weights (same seed makes them equal already; resuming ranks read the same file).
    std::vector<torch::Tensor> state;
    for (auto& p : model->parameters()) state.push_back(p.data());
    for (auto& b : model->buffers()) state.push_back(b.data());
    dist->broadcast_(state);
    dist->attach_gradient_buckets(model->parameters());
    spdlog::info("data-parallel: rank {} of {} ({}), {} gradient bucket(s) of {:.1f} MB in all", rank, world,
                 dist->backend(), dist->stats().buckets, dist->stats().gradient_bytes / 1e6);
  }
  // The random state of every rank, for checkpoints (collective: all ranks call it at the same points).
  auto rank_rng_states = [&]() -> std::vector<torch::Tensor> {
    if (!dist) return {};
    return dist->allgather(at::detail::getDefaultCPUGenerator().get_state());
  };

  auto write_checkpoint = [&](const std::string& path, const std::vector<torch::Tensor>& rngs) {
    save_checkpoint(path, model, &optim, st, {rngs, opt.test_checkpoint_pause_ms});
  };

  std::optional<RemoveSink> remove_sink;
  if (main_rank) {
    make_dirs(dir);
    if (::access(dir.c_str(), W_OK) != 0) throw UsageError(dir + ": run directory is not writable");
    if (!opt.resume && opt.overwrite) {
      for (const char* f : {"last.pt", "best.pt", "metrics.jsonl", "config.json", "src.vocab", "tgt.vocab", "train.log", "curves.svg"}) {
        std::error_code ec;
        fs::remove(dir + "/" + f, ec);
      }
    }
    remove_stale_temporaries(dir);
    if (opt.resume) drop_metrics_after(dir + "/metrics.jsonl", st.step);
    write_file_atomic(cfg_path, resolved.dump(2) + "\n");
    if (!opt.resume) {
      data.src_vocab.save(dir + "/src.vocab");
      data.tgt_vocab.save(dir + "/tgt.vocab");
    }

    // Everything logged from here on also goes to run_dir/train.log (appended on resume).
    {
      std::string early_lines;
      for (const auto& l : early->last_formatted()) early_lines += l;
      std::ofstream(dir + "/train.log", std::ios::app | std::ios::binary) << early_lines;
    }
    auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/train.log", false);
    file_sink->set_pattern(kLogPattern);
    logger->sinks().push_back(file_sink);
    remove_sink.emplace(logger, file_sink);
  }
  remove_early.reset();

  spdlog::info("padding fraction of the first epoch's batches: {:.3f}",
               padding_fraction(data.train, make_batch_plan(data.train, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed), 0, true)));
  auto set_lr = [&](double lr) {
    for (auto& g : optim.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
  };
  set_lr(st.lr);

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
  const bool higher_better = cfg.train.early_stopping.metric == "bleu";
  const double t0 = now_s();
  double window_loss = 0, window_tokens = 0, window_t = now_s();
  int64_t window_tgt_tokens = 0;
  const bool tty = main_rank && ::isatty(STDERR_FILENO) != 0;
  auto comm_note = [&]() -> std::string {
    if (!dist || dist->stats().gradient_allreduces == 0) return "";
    const auto& cs = dist->stats();
    return fmt::format(", gradient all-reduce {:.1f} ms/step", 1e3 * cs.gradient_seconds / static_cast<double>(cs.gradient_allreduces));
  };
  double last_progress = 0;

  const double base_elapsed = st.elapsed_s;
  auto update_elapsed = [&]() { st.elapsed_s = base_elapsed + (now_s() - t0); };
  auto do_validation = [&](int64_t reported_epoch) {
    ValidationResult v;
    if (main_rank) v = validate(model, data, cfg, device);
    if (dist) {  // the others take rank 0's figures, so that LR schedule and early stopping agree
      torch::Tensor t = torch::tensor({v.loss, v.ppl, v.bleu}, torch::kDouble);
      dist->broadcast_({t});
      v = {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
    }
    update_elapsed();
    double elapsed = st.elapsed_s;
    double train_loss = window_tokens > 0 ? window_loss / window_tokens : 0.0;
    double tps = window_tgt_tokens / std::max(1e-9, now_s() - window_t);
    double metric = higher_better ? v.bleu : v.ppl;
    bool improved = !st.has_best || (higher_better ? metric > st.best_metric : metric < st.best_metric);
    if (improved) {
      st.best_metric = metric;
      st.has_best = true;
      st.bad_validations = 0;
      st.plateau_bad = 0;
    } else {
      ++st.bad_validations;
      ++st.plateau_bad;
      if (cfg.train.lr_schedule.type == "plateau" && st.plateau_bad > cfg.train.lr_schedule.patience) {
        st.lr = std::max(cfg.train.lr_schedule.min_lr, st.lr * cfg.train.lr_schedule.factor);
        set_lr(st.lr);
        st.plateau_bad = 0;
        spdlog::info("learning rate reduced to {:.3g}", st.lr);
      }
    }
    nlohmann::json m = {{"step", st.step},        {"epoch", reported_epoch + 1},     {"train_loss", train_loss},
                        {"valid_loss", v.loss},   {"valid_ppl", v.ppl},        {"valid_bleu", v.bleu},
                        {"lr", st.lr},            {"tokens_per_s", tps},       {"elapsed_s", elapsed}};
    if (dist) m["world_size"] = world;
    result.validations.push_back(v);
    auto rngs = rank_rng_states();
    if (main_rank) {
      append_line(dir + "/metrics.jsonl", m.dump());
      write_curves(dir);
      if (tty) std::fprintf(stderr, "\r\033[K");
      spdlog::info("validation at step {} (epoch {}): train loss {:.4f}, valid loss {:.4f}, ppl {:.2f}, BLEU {:.2f}{}",
                   st.step, reported_epoch + 1, train_loss, v.loss, v.ppl, v.bleu, improved ? " (best)" : "");
      if (improved) write_checkpoint(best, rngs);
      write_checkpoint(last, rngs);
    }
    window_loss = window_tokens = 0;
    window_tgt_tokens = 0;
    window_t = now_s();
    if (cfg.train.early_stopping.patience > 0 && st.bad_validations >= cfg.train.early_stopping.patience) {
      spdlog::info("early stopping: {} validations without improvement", st.bad_validations);
      st.finished = true;
    }
  };

  model->train();
  // A resumed run continues as long as its (possibly raised) limits allow.
  st.finished = (cfg.train.max_steps > 0 && st.step >= cfg.train.max_steps) ||
                (cfg.train.early_stopping.patience > 0 && st.bad_validations >= cfg.train.early_stopping.patience);
  bool stop = st.finished;
  int64_t last_validated = result.validations.empty() ? (opt.resume ? st.step : -1) : st.step;
  while (!stop && st.epoch < cfg.train.epochs) {
    auto plan = make_batch_plan(data.train, cfg.train.batch_size, static_cast<uint64_t>(cfg.train.seed), st.epoch, true);
    const int64_t per_epoch = static_cast<int64_t>(plan.size());
    while (st.batch_in_epoch < per_epoch) {
      const auto& rows = plan[static_cast<size_t>(st.batch_in_epoch)];
      // The loss is summed over the batch's target tokens and divided by their number in the whole batch,
      // so that gradients summed over the ranks' slices equal the one-process gradient.
      int64_t batch_tokens = 0;
      for (int64_t i : rows) batch_tokens += static_cast<int64_t>(data.train[static_cast<size_t>(i)].tgt.size()) + 1;
      const std::vector<int64_t> mine = dist ? shard_rows(rows, rank, world) : rows;
      if (dist)
        dist->zero_gradients();
      else
        optim.zero_grad();
      double lv = 0;
      if (!mine.empty()) {  // a batch with fewer rows than ranks leaves some ranks without a slice
        lv = accumulate_gradients(model, make_batch(data.train, mine).to(device), batch_tokens, cfg.train.label_smoothing,
                                  cfg.train.teacher_forcing);
      }
      if (opt.test_nan_at_step > 0 && st.step + 1 == opt.test_nan_at_step) lv = std::nan("");  // fault injection for tests
      int sig = g_stop_signal.load();
      bool time_up = cfg.train.max_minutes > 0 && (base_elapsed + now_s() - t0) / 60.0 >= cfg.train.max_minutes;
      if (dist) {
        dist->allreduce_gradients();
        // One small sum carries what every rank must agree on: the batch loss, stop requests, rank 0's clock.
        torch::Tensor c = torch::tensor({lv, sig == SIGINT ? 1.0 : 0.0, sig != 0 && sig != SIGINT ? 1.0 : 0.0,
                                         main_rank && time_up ? 1.0 : 0.0}, torch::kDouble);
        dist->allreduce_sum_(c);
        lv = c[0].item<double>();
        sig = c[2].item<double>() > 0 ? SIGTERM : c[1].item<double>() > 0 ? SIGINT : 0;
        time_up = c[3].item<double>() > 0;
      }
      if (!std::isfinite(lv)) {
        throw Error("loss became " + std::string(std::isnan(lv) ? "NaN" : "infinite") + " at step " +
                    std::to_string(st.step + 1) + "; last good checkpoint: " +
                    (fs::exists(last) ? last : std::string("none")));
      }
      apply_update(model, optim, cfg.train.clip_norm);
      ++st.step;
      ++st.batch_in_epoch;
      window_loss += lv;
      window_tokens += static_cast<double>(batch_tokens);
      window_tgt_tokens += batch_tokens;
      double now = now_s();
      if (tty && now - last_progress > 0.25) {
        double tps = window_tgt_tokens / std::max(1e-9, now - window_t);
        std::fprintf(stderr, "\r\033[Kepoch %lld  step %lld (%lld/%lld)  loss %.4f  %.0f tok/s", static_cast<long long>(st.epoch + 1),
                     static_cast<long long>(st.step), static_cast<long long>(st.batch_in_epoch), static_cast<long long>(per_epoch),
                     window_loss / std::max(1.0, window_tokens), tps);
        last_progress = now;
      } else if (!tty && st.step % cfg.train.log_every == 0) {
        spdlog::info("epoch {} step {} ({}/{}) loss {:.4f} {:.0f} tok/s{}", st.epoch + 1, st.step, st.batch_in_epoch,
                     per_epoch, window_loss / std::max(1.0, window_tokens),
                     window_tgt_tokens / std::max(1e-9, now - window_t), comm_note());
      }
      const bool at_epoch_end = st.batch_in_epoch == per_epoch;
      if (at_epoch_end) {  // move the position to the next epoch before any checkpoint
        ++st.epoch;
        st.batch_in_epoch = 0;
      }
      const bool step_limit = cfg.train.max_steps > 0 && st.step >= cfg.train.max_steps;
      const bool time_limit = time_up;
      if (at_epoch_end || (cfg.train.valid_every > 0 && st.step % cfg.train.valid_every == 0)) {
        do_validation(at_epoch_end ? st.epoch - 1 : st.epoch);  // report the epoch the step belongs to
        last_validated = st.step;
      }
      if (st.epoch >= cfg.train.epochs || step_limit || time_limit) st.finished = true;
      if (st.finished && last_validated != st.step) {  // every run ends with a validation (and best.pt)
        do_validation(at_epoch_end ? st.epoch - 1 : st.epoch);
        last_validated = st.step;
      }
      if (st.finished) stop = true;
      if (!dist) sig = g_stop_signal.load();  // one process also stops for a signal that came during validation
      update_elapsed();
      if (sig != 0) {
        auto rngs = rank_rng_states();
        if (main_rank) write_checkpoint(last, rngs);
        if (main_rank) spdlog::warn("stopped by signal {} at step {}; resume with --resume ({} written)", sig, st.step, last);
        result.state = st;
        result.exit_code = 128 + sig;
        return result;
      }
      if (stop || at_epoch_end) break;
    }
  }
  st.finished = true;
  update_elapsed();
  auto rngs = rank_rng_states();
  if (main_rank) write_checkpoint(last, rngs);
  spdlog::info("training done at step {} ({:.1f} s); best {} {:.3f}; checkpoints {} and {}{}", st.step,
               st.elapsed_s, cfg.train.early_stopping.metric, st.best_metric, best, last, comm_note());
  result.state = st;
  return result;
}

}  // namespace attnmt
