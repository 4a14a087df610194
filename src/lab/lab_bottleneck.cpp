// The lab's experiment "bottleneck". A fair bottleneck: the fixed context against attention, each model trained until its validation stops improving.
#include "lab/lab_common.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "eval/report.h"
#include "run/run_dir.h"

namespace attnmt::lab_detail {

namespace fs = std::filesystem;
using nlohmann::json;

LabReport bottleneck(const LabOptions& opt) {
  LabReport rep;
  rep.name = "bottleneck";
  rep.title = "A fair bottleneck: the fixed context trained to convergence, and made 2x and 4x wider";
  rep.claim = "one fixed-length vector cannot hold a long sentence; attention relieves it. The objections: the fixed-context "
              "model was trained less, and a larger vector would hold the sentence.";
  struct Spec {
    std::string name, file;
    std::vector<Override> sets;
  };
  const int hidden = lab_config(opt, "none", "none.json", budget(opt.bottleneck_minutes, opt)).model.hidden_dim;  // 2x and 4x of the shipped size
  std::vector<Spec> specs = {{"none", "none.json", budget(opt.bottleneck_minutes, opt)},
                             {"none_x2", "none.json", budget(opt.bottleneck_minutes, opt, {[hidden](Config& c) { c.model.hidden_dim = 2 * hidden; }})},
                             {"none_x4", "none.json", budget(opt.bottleneck_minutes, opt, {[hidden](Config& c) { c.model.hidden_dim = 4 * hidden; }})},
                             {"bahdanau", "bahdanau.json", budget(opt.bottleneck_minutes, opt)}};
  // The self-attention encoder-decoder beside them, under the same budget, where the configs have one.
  if (fs::is_regular_file(opt.configs + "/self_attention.json"))
    specs.push_back({"self_attention", "self_attention.json", budget(opt.bottleneck_minutes, opt)});
  std::vector<RunSummary> sums;
  json runs = json::array();
  for (const auto& s : specs) {
    // Their own folder: the bahdanau run here has the bottleneck's budget, not that of the other experiments' bahdanau.
    const std::string run_name = "bottleneck/" + s.name;
    LabRun r = train_or_reuse(opt, run_name, lab_config(opt, run_name, s.file, s.sets));
    test_eval(r, 5);
    sums.push_back(summarize_run(r.dir(), "test", opt.device));
    const RunSummary& m = sums.back();
    json by = json::array();
    for (const auto& b : m.eval.by_length) by.push_back({{"min", b.min}, {"max", b.max}, {"count", b.count}, {"bleu", b.bleu}});
    double best_valid = 0;
    for (const auto& rec : RunDir(r.dir()).read_metrics()) best_valid = std::max(best_valid, rec.valid_bleu);
    runs.push_back({{"name", s.name}, {"attention", m.attention}, {"hidden_dim", r.cfg.model.hidden_dim},
                    {"parameters", m.parameters}, {"train_minutes", m.train_s / 60}, {"epochs", m.epochs}, {"steps", m.steps},
                    {"ended_by", m.ended_by}, {"best_valid_bleu", best_valid}, {"test_bleu", m.eval.bleu},
                    {"test_chrf", m.eval.chrf}, {"by_length", by}});
  }
  const std::string dir = opt.out + "/" + rep.name;
  write_comparison(dir + "/compare", sums, "test");
  fs::copy_file(dir + "/compare/bleu_by_length.svg", dir + "/bleu_by_length.svg", fs::copy_options::overwrite_existing);
  rep.charts = {"bleu_by_length.svg"};
  rep.figures = {{"budget_minutes", opt.bottleneck_minutes}, {"patience", opt.patience}, {"beam", 5}, {"runs", runs}};

  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs) {
    std::vector<std::string> row = {r["name"], std::to_string(r["hidden_dim"].get<int>()), std::to_string(r["parameters"].get<int64_t>()),
                                    num(r["train_minutes"].get<double>(), 1), std::to_string(r["epochs"].get<int64_t>()),
                                    r["ended_by"].get<std::string>(), num(r["test_bleu"].get<double>())};
    for (const auto& b : r["by_length"]) row.push_back(num(b["bleu"].get<double>()));
    rows.push_back(row);
  }
  std::vector<std::string> header = {"run", "hidden", "parameters", "train min", "epochs", "ended by", "BLEU"};
  for (const auto& b : sums[0].eval.by_length)
    header.push_back(std::to_string(b.min) + "-" + (b.max < 0 ? std::string() : std::to_string(b.max)));
  rep.table_html = html_table(header, rows) + "<p>Comparison report: <a href=\"compare/index.html\">compare/index.html</a>.</p>";

  // The finding, from the figures.
  auto first = [](const json& r) { return r["by_length"].front()["bleu"].get<double>(); };
  auto last = [](const json& r) { return r["by_length"].back()["bleu"].get<double>(); };
  const json &n1 = runs[0], &n4 = runs[2], &bah = runs[3];
  std::ostringstream f;
  f << "With the same budget (" << num(opt.bottleneck_minutes, 1) << " min each, early stopping after " << opt.patience
    << " validations without improvement, no epoch cap), the fixed-context model reaches " << num(n1["test_bleu"].get<double>())
    << " test BLEU (ended by " << n1["ended_by"].get<std::string>() << " after " << n1["epochs"].get<int64_t>() << " epochs): "
    << num(first(n1)) << " on the shortest sentences, " << num(last(n1)) << " on the longest. ";
  for (size_t k = 1; k < 3; ++k) {
    const json& r = runs[k];
    f << "With hidden size " << r["hidden_dim"].get<int>() << " (" << r["parameters"].get<int64_t>() << " parameters, "
      << num(static_cast<double>(r["parameters"].get<int64_t>()) / static_cast<double>(bah["parameters"].get<int64_t>()), 1)
      << "x Bahdanau's) it reaches " << num(r["test_bleu"].get<double>()) << " (" << num(first(r)) << " short, " << num(last(r))
      << " long; ended by " << r["ended_by"].get<std::string>() << "). ";
  }
  f << "Bahdanau attention, with " << bah["parameters"].get<int64_t>() << " parameters, reaches " << num(bah["test_bleu"].get<double>())
    << " (" << num(first(bah)) << " short, " << num(last(bah)) << " long; ended by " << bah["ended_by"].get<std::string>() << "). ";
  const double gap1 = last(bah) - last(n1), gap4 = last(bah) - last(n4);
  f << "On the longest sentences the gap to attention is " << num(gap1, 1) << " BLEU points at the same size and " << num(gap4, 1)
    << " with 4x the hidden size: " << (gap4 < gap1 * 0.5 ? "the wider vector closes more than half of it" : gap4 < gap1 ? "the wider vector narrows it, but most of it remains" : "the wider vector does not narrow it") << ".";
  if (runs.size() > 4) {
    const json& sa = runs[4];
    f << " The self-attention encoder-decoder (" << sa["parameters"].get<int64_t>() << " parameters) reaches "
      << num(sa["test_bleu"].get<double>()) << " (" << num(first(sa)) << " short, " << num(last(sa)) << " long; ended by "
      << sa["ended_by"].get<std::string>() << ").";
  }
  rep.finding = f.str();
  return rep;
}

}  // namespace attnmt::lab_detail
