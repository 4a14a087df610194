// A run directory: the names of the files a run keeps there, and the records written into them: the
// validation log (metrics.jsonl, one JSON object per validation) and evaluation results
// (eval/<name>.json beside eval/<name>.hyp). Training, evaluation, the report and the CLI find files
// only through this class.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/result.h"

namespace attnmt {

// One line of metrics.jsonl: the figures of one validation.
struct MetricsRecord {
  int64_t step = 0;
  int64_t epoch = 0;  // 1-based epoch the step belongs to
  double train_loss = 0, valid_loss = 0, valid_ppl = 0, valid_bleu = 0;
  double lr = 0, tokens_per_s = 0, elapsed_s = 0;
  int world_size = 1;  // data-parallel ranks (written only when > 1)

  nlohmann::json to_json() const;
  // Null for a line that is not a metrics record (torn, or written by something else).
  static std::optional<MetricsRecord> parse(const std::string& line);
};

// train.json: how the last training of the run ended (written when it ends other than by a signal).
struct TrainSummary {
  std::string ended_by;    // "early stopping" | "max_minutes" | "max_steps" | "epochs"
  int64_t step = 0;        // updates done
  double epochs = 0;       // passes over the training data (fractional)
  double elapsed_s = 0;    // training time, validations included
  double valid_s = 0;      // of elapsed_s: validations and their checkpoint writes
  int64_t target_tokens = 0;  // target tokens trained on (<eos> included, padding not), all epochs and resumes
  double peak_rss_mb = 0;  // the highest peak resident memory of the run's (main) processes, MiB
  std::string metric;      // the early-stopping metric (bleu | ppl)
  double best_metric = 0;  // its best validation value
  double train_s() const { return elapsed_s - valid_s; }  // training alone
  double tokens_per_s() const { return train_s() > 0 ? static_cast<double>(target_tokens) / train_s() : 0.0; }
  nlohmann::json to_json() const;
};

class RunDir {
 public:
  explicit RunDir(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  std::string config() const { return file("config.json"); }  // the resolved config of the run
  std::string checkpoint(const std::string& which) const { return file(which + ".pt"); }  // best | last
  std::string last() const { return checkpoint("last"); }
  std::string best() const { return checkpoint("best"); }
  std::string src_vocab() const { return file("src.vocab"); }
  std::string tgt_vocab() const { return file("tgt.vocab"); }
  std::string src_spm() const { return file("src.spm.model"); }  // SentencePiece models (tokenizer sentencepiece)
  std::string tgt_spm() const { return file("tgt.spm.model"); }
  std::string metrics() const { return file("metrics.jsonl"); }
  std::string train_log() const { return file("train.log"); }
  std::string curves() const { return file("curves.svg"); }
  std::string train_summary() const { return file("train.json"); }
  std::string maps_index() const { return file("maps/index.html"); }
  std::string eval_dir() const { return file("eval"); }
  std::string eval_json(const std::string& name) const { return file("eval/" + name + ".json"); }
  std::string eval_hyp(const std::string& name) const { return file("eval/" + name + ".hyp"); }

  // A periodic checkpoint (train.keep_checkpoints): ckpt-<step>.pt.
  std::string periodic_checkpoint(int64_t step) const { return file("ckpt-" + std::to_string(step) + ".pt"); }
  // The periodic checkpoints present, oldest first.
  std::vector<std::string> periodic_checkpoints() const;
  // Removes all but the newest `keep`; returns how many were removed.
  int prune_periodic_checkpoints(int keep) const;

  // Attention snapshots during training (train.snapshot_sentences): progress/step-<step, 8 digits>.json, and
  // progress/index.html, the page that plays them back.
  std::string progress_dir() const { return file("progress"); }
  std::string progress_index() const { return file("progress/index.html"); }
  std::string progress_snapshot(int64_t step) const;
  std::vector<std::string> progress_snapshots() const;  // oldest first
  // Removes the snapshots after `step` (taken after the checkpoint being resumed); returns how many.
  int drop_progress_after(int64_t step) const;

  // The files training writes (removed by `train --overwrite` before the new run starts).
  std::vector<std::string> training_files() const;
  // The files without which the directory is not a trained run (config and vocabularies).
  std::vector<std::string> required_files() const { return {config(), src_vocab(), tgt_vocab()}; }

  // Appends one record as one write (a kill leaves the whole line or none of it).
  void append_metrics(const MetricsRecord& m) const;
  // Every readable record, in file order (an absent file gives none).
  std::vector<MetricsRecord> read_metrics() const;
  // Drops the records after `step` (logged after the checkpoint being resumed); returns how many.
  int drop_metrics_after(int64_t step) const;

  // Writes train.json atomically; reads it (nullopt when absent or unreadable: a run from before it existed).
  void write_train_summary(const TrainSummary& s) const;
  std::optional<TrainSummary> read_train_summary() const;

  // Writes eval/<name>.hyp (one hypothesis per line) and eval/<name>.json, each atomically.
  void write_eval(const std::string& name, const EvalResult& r, const std::vector<std::string>& hyps) const;
  // Reads eval/<name>.json; UsageError naming the file when it is not an evaluation result.
  EvalResult read_eval(const std::string& name) const;

 private:
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string path_;
};

}  // namespace attnmt
