#include "run/run_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/config.h"
#include "common/errors.h"
#include "common/fs.h"

namespace attnmt {

namespace fs = std::filesystem;

nlohmann::json MetricsRecord::to_json() const {
  nlohmann::json m = {{"step", step},         {"epoch", epoch},           {"train_loss", train_loss},
                      {"valid_loss", valid_loss}, {"valid_ppl", valid_ppl}, {"valid_bleu", valid_bleu},
                      {"lr", lr},             {"tokens_per_s", tokens_per_s}, {"elapsed_s", elapsed_s}};
  if (world_size > 1) m["world_size"] = world_size;
  return m;
}

std::optional<MetricsRecord> MetricsRecord::parse(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  MetricsRecord m;
  try {
    m.step = j["step"].get<int64_t>();
    m.epoch = j.value("epoch", int64_t{0});
    m.train_loss = j.value("train_loss", 0.0);
    m.valid_loss = j.value("valid_loss", 0.0);
    m.valid_ppl = j.value("valid_ppl", 0.0);
    m.valid_bleu = j.value("valid_bleu", 0.0);
    m.lr = j.value("lr", 0.0);
    m.tokens_per_s = j.value("tokens_per_s", 0.0);
    m.elapsed_s = j.value("elapsed_s", 0.0);
    m.world_size = j.value("world_size", 1);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return m;
}

nlohmann::json TrainSummary::to_json() const {
  return {{"ended_by", ended_by},       {"step", step},
          {"epochs", epochs},           {"elapsed_s", elapsed_s},
          {"train_s", train_s()},       {"valid_s", valid_s},
          {"target_tokens", target_tokens}, {"tokens_per_s", tokens_per_s()},
          {"peak_rss_mb", peak_rss_mb}, {"metric", metric},
          {"best_metric", best_metric}};
}

void RunDir::write_train_summary(const TrainSummary& s) const { write_file_atomic(train_summary(), s.to_json().dump(2) + "\n"); }

std::optional<TrainSummary> RunDir::read_train_summary() const {
  std::ifstream in(train_summary(), std::ios::binary);
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("ended_by") || !j["ended_by"].is_string()) return std::nullopt;
  TrainSummary s;
  try {
    s.ended_by = j["ended_by"].get<std::string>();
    s.step = j.value("step", int64_t{0});
    s.epochs = j.value("epochs", 0.0);
    s.elapsed_s = j.value("elapsed_s", 0.0);
    s.valid_s = j.value("valid_s", 0.0);
    s.target_tokens = j.value("target_tokens", int64_t{0});
    s.peak_rss_mb = j.value("peak_rss_mb", 0.0);
    s.metric = j.value("metric", std::string());
    s.best_metric = j.value("best_metric", 0.0);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return s;
}

std::vector<std::string> RunDir::training_files() const {
  std::vector<std::string> f = {last(), best(), metrics(), config(), src_vocab(), tgt_vocab(), src_spm(), tgt_spm(), train_log(), curves(),
                                train_summary()};
  for (auto& p : periodic_checkpoints()) f.push_back(std::move(p));
  for (auto& p : progress_snapshots()) f.push_back(std::move(p));
  f.push_back(progress_index());
  return f;
}

std::string RunDir::progress_snapshot(int64_t step) const {
  char name[48];
  std::snprintf(name, sizeof(name), "progress/step-%08lld.json", static_cast<long long>(step));
  return file(name);
}

namespace {
// The step of a file named <prefix><digits><suffix>, or -1.
int64_t step_of(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

// The files of dir named <prefix><step><suffix>, by step.
std::vector<std::pair<int64_t, std::string>> numbered_files(const std::string& dir, const std::string& prefix,
                                                            const std::string& suffix) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = step_of(it->path().filename().string(), prefix, suffix);
    if (step >= 0) found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}
}  // namespace

std::vector<std::string> RunDir::progress_snapshots() const {
  std::vector<std::string> out;
  for (auto& [step, p] : numbered_files(progress_dir(), "step-", ".json")) out.push_back(std::move(p));
  return out;
}

int RunDir::drop_progress_after(int64_t step) const {
  int dropped = 0;
  for (const auto& [s, p] : numbered_files(progress_dir(), "step-", ".json")) {
    std::error_code ec;
    if (s > step && fs::remove(p, ec)) ++dropped;
  }
  return dropped;
}

std::vector<std::string> RunDir::periodic_checkpoints() const {
  std::vector<std::string> out;
  for (auto& [step, p] : numbered_files(path_, "ckpt-", ".pt")) out.push_back(std::move(p));
  return out;
}

int RunDir::prune_periodic_checkpoints(int keep) const {
  std::vector<std::string> all = periodic_checkpoints();
  int removed = 0;
  for (size_t i = 0; i + static_cast<size_t>(std::max(0, keep)) < all.size(); ++i) {
    std::error_code ec;
    if (fs::remove(all[i], ec)) ++removed;
  }
  return removed;
}

void RunDir::append_metrics(const MetricsRecord& m) const {
  // One write() of a whole line: a kill leaves either the full line or none of it (O_APPEND).
  const std::string path = metrics(), l = m.to_json().dump() + "\n";
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw Error(path + ": cannot open for appending");
  size_t w = std::fwrite(l.data(), 1, l.size(), f);
  int rc = std::fclose(f);
  if (w != l.size() || rc != 0) throw Error(path + ": write failed (disk full?)");
}

std::vector<MetricsRecord> RunDir::read_metrics() const {
  std::vector<MetricsRecord> out;
  std::ifstream in(metrics(), std::ios::binary);
  for (std::string line; std::getline(in, line);)
    if (auto m = MetricsRecord::parse(line)) out.push_back(*m);
  return out;
}

int RunDir::drop_metrics_after(int64_t step) const {
  const std::string path = metrics();
  if (!fs::is_regular_file(path)) return 0;
  std::ifstream in(path, std::ios::binary);
  std::string line, kept;
  int dropped = 0;
  while (std::getline(in, line)) {
    auto m = MetricsRecord::parse(line);
    if (m && m->step <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

void RunDir::write_eval(const std::string& name, const EvalResult& r, const std::vector<std::string>& hyps) const {
  make_dirs(eval_dir());
  std::string text;
  for (const auto& h : hyps) text += h + "\n";
  write_file_atomic(eval_hyp(name), text);
  write_file_atomic(eval_json(name), r.to_json().dump(2) + "\n");
}

EvalResult RunDir::read_eval(const std::string& name) const {
  const std::string path = eval_json(name);
  try {
    return EvalResult::from_json(read_json_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": not an evaluation result: " + e.what());
  }
}

}  // namespace attnmt
