#include "lab/lab_common.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/config.h"
#include "common/errors.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "data/text.h"

#include "eval/evaluator.h"
#include "run/run_dir.h"
#include "train/trainer.h"
#include "viz/attention_maps.h"

namespace attnmt::lab_detail {

namespace fs = std::filesystem;
using nlohmann::json;

std::string sci(double v) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

std::string num(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------
// Runs: a shipped config with overrides, trained into OUT/runs/<name>, or reused when a finished run of the same
// config is there.

Config lab_config(const LabOptions& opt, const std::string& name, const std::string& file, const std::vector<Override>& sets) {
  const std::string path = opt.configs + "/" + file;
  if (!fs::is_regular_file(path)) throw UsageError("lab: " + path + " not found (run from the repository root, or pass --configs)");
  Config c = load_config(path, {});
  c.run_dir = opt.out + "/runs/" + name;
  for (const auto& set : sets) set(c);
  c.device = opt.device;
  try {
    validate(c);
  } catch (const UsageError& e) {
    throw UsageError(path + " with the lab's changes: " + e.what());
  }
  return c;
}

// The budget every compared model gets: the wall-clock minutes, early stopping, no epoch cap.
std::vector<Override> budget(double minutes, const LabOptions& opt, std::vector<Override> more) {
  const double ms = std::round(minutes * 1000.0) / 1000.0;
  const int patience = opt.patience;
  std::vector<Override> s = {[ms, patience](Config& c) {
    c.train.epochs = 100000;
    c.train.max_minutes = ms;
    c.train.early_stopping.patience = patience;
  }};
  s.insert(s.end(), more.begin(), more.end());
  return s;
}

LabRun train_or_reuse(const LabOptions& opt, const std::string& name, const Config& cfg) {
  LabRun r{name, cfg, false};
  const RunDir dir(cfg.run_dir);
  if (!opt.retrain && dir.read_train_summary() && fs::is_regular_file(dir.best()) && fs::is_regular_file(dir.config())) {
    if (config_to_json(config_from_json(read_json_file(dir.config()))) == config_to_json(cfg)) {
      spdlog::info("lab: {}: reusing the finished run in {}", name, cfg.run_dir);
      r.reused = true;
      return r;
    }
  }
  spdlog::info("lab: {}: training into {}", name, cfg.run_dir);
  TrainOptions to;
  to.overwrite = true;
  TrainResult tr = train(cfg, to, resolve_device(cfg.device));
  if (tr.exit_code != 0) throw LabInterrupted("lab: training of " + name + " stopped by a signal", tr.exit_code);
  return r;
}

// The run's test evaluation with beam `beam` (read back when it is there and the run was reused).
EvalResult test_eval(const LabRun& r, int beam) {
  const RunDir dir(r.dir());
  if (r.reused && fs::is_regular_file(dir.eval_json("test"))) {
    EvalResult e = dir.read_eval("test");
    if (e.beam_size == beam) return e;
  }
  LoadedRun run = load_run(r.dir(), "best", r.cfg.device);
  EvalRequest req;
  req.beam = beam;
  return evaluate_run(run, r.dir(), req);
}


TestSet read_test_set(const Config& cfg) {
  TestSet t;
  t.src = read_lines(cfg.data.test.src);
  t.ref = read_lines(cfg.data.test.tgt);
  if (t.src.size() != t.ref.size()) throw UsageError("lab: the test source and reference differ in length");
  std::vector<size_t> sl, tl;
  for (size_t i = 0; i < t.src.size(); ++i) {
    t.src_tok.push_back(split_whitespace(t.src[i]));
    t.ref_tok.push_back(split_whitespace(t.ref[i]));
    sl.push_back(t.src_tok.back().size());
    tl.push_back(t.ref_tok.back().size());
  }
  if (!cfg.data.test.align.empty()) t.align = read_alignments(cfg.data.test.align, &sl, &tl);
  return t;
}

// ---------------------------------------------------------------------------------------------------------------
// Pages

const char* const kPageStyle =
    "body{font-family:sans-serif;margin:2em;max-width:1100px;line-height:1.4}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
    ".claim{color:#555}.finding{background:#f4f8ff;border-left:4px solid #36c;padding:.6em 1em}img{max-width:100%}";

void write_report(const LabOptions& opt, LabReport& rep) {
  const std::string dir = opt.out + "/" + rep.name;
  make_dirs(dir);
  json j = {{"name", rep.name}, {"title", rep.title}, {"claim", rep.claim}, {"finding", rep.finding},
            {"figures", rep.figures}, {"charts", rep.charts}, {"seconds", rep.seconds}};
  write_file_atomic(dir + "/lab.json", j.dump(2) + "\n");
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnmt lab: " << xml_escape(rep.title)
    << "</title><style>" << kPageStyle << "</style></head><body>\n<p><a href=\"../index.html\">attnmt lab</a></p>\n<h1>"
    << xml_escape(rep.title) << "</h1>\n<p class=\"claim\">The claim: " << xml_escape(rep.claim) << "</p>\n<p class=\"finding\">"
    << xml_escape(rep.finding) << "</p>\n"
    << rep.table_html << "\n";
  for (const auto& c : rep.charts) h << "<p><img src=\"" << xml_escape(c) << "\" alt=\"" << xml_escape(c) << "\"></p>\n";
  h << "<p>Every figure: <a href=\"lab.json\">lab.json</a>. Took " << num(rep.seconds / 60, 1) << " min.</p>\n</body></html>\n";
  write_file_atomic(dir + "/index.html", h.str());
}

std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream h;
  h << "<table><tr>";
  for (const auto& c : header) h << "<th>" << xml_escape(c) << "</th>";
  h << "</tr>\n";
  for (const auto& r : rows) {
    h << "<tr>";
    for (const auto& c : r) h << "<td>" << xml_escape(c) << "</td>";
    h << "</tr>\n";
  }
  h << "</table>";
  return h.str();
}

}  // namespace attnmt::lab_detail
