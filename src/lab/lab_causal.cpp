// The lab's experiment "causal". The causal mask: a self-attention decoder that may look ahead.
#include "lab/lab_common.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "common/fs.h"
#include "run/run_dir.h"
#include "viz/charts.h"

namespace attnmt::lab_detail {
using nlohmann::json;

LabReport causal(const LabOptions& opt) {
  LabReport rep;
  rep.name = "causal";
  rep.title = "The causal mask: a decoder that may look at the next words learns to copy them";
  rep.claim = "without the causal mask an autoregressive decoder cheats by peeking at future tokens: its training loss falls "
              "far below the masked model's, and at decoding time, when there is no future to peek at, it fails.";
  // Both runs stop early on the teacher-forced validation perplexity (what the loss says), not on BLEU: the unmasked
  // model's greedy BLEU never rises, and stopping on it would end that run before its loss could show anything.
  json runs = json::array();
  std::vector<std::vector<std::string>> rows;
  std::vector<Series> loss_s, bleu_s;
  std::vector<std::vector<MetricsRecord>> all_metrics;
  for (bool mask : {true, false}) {
    const std::string name = mask ? "sa_causal" : "sa_no_causal_mask";
    LabRun r = train_or_reuse(opt, name, lab_config(opt, name, "self_attention.json",
                                                    budget(opt.minutes, opt, {[mask](Config& c) {
                                                      c.model.decoder.causal_mask = mask;
                                                      c.train.valid_every = 100;
                                                      c.train.early_stopping.metric = "ppl";
                                                    }})));
    const EvalResult e = test_eval(r, 1);
    const auto metrics = RunDir(r.dir()).read_metrics();
    const auto summary = RunDir(r.dir()).read_train_summary();
    all_metrics.push_back(metrics);
    const std::string label = mask ? "causal mask" : "no causal mask";
    Series l{label + ": training loss", {}, {}}, v{label + ": validation loss", {}, {}}, b{label, {}, {}};
    json curve = json::array();
    double best_bleu = 0, min_loss = std::numeric_limits<double>::infinity(), min_valid = min_loss;
    for (const auto& m : metrics) {
      for (Series* sr : {&l, &v, &b}) sr->x.push_back(static_cast<double>(m.step));
      l.y.push_back(m.train_loss);
      v.y.push_back(m.valid_loss);
      b.y.push_back(m.valid_bleu);
      curve.push_back({{"step", m.step}, {"train_loss", m.train_loss}, {"valid_loss", m.valid_loss}, {"valid_bleu_greedy", m.valid_bleu}});
      best_bleu = std::max(best_bleu, m.valid_bleu);
      min_loss = std::min(min_loss, m.train_loss);
      min_valid = std::min(min_valid, m.valid_loss);
    }
    loss_s.push_back(l);
    loss_s.push_back(v);
    bleu_s.push_back(b);
    runs.push_back({{"name", name}, {"causal_mask", mask}, {"test_bleu_greedy", e.bleu}, {"validations", metrics.size()},
                    {"lowest_train_loss", min_loss}, {"lowest_valid_loss", min_valid}, {"best_valid_bleu_greedy", best_bleu},
                    {"steps", metrics.empty() ? 0 : metrics.back().step}, {"ended_by", summary ? summary->ended_by : ""},
                    {"curve", curve}});
    rows.push_back({name, mask ? "on" : "off", std::to_string(metrics.empty() ? 0 : metrics.back().step), num(min_loss, 4),
                    num(min_valid, 4), num(best_bleu), num(e.bleu), summary ? summary->ended_by : "?"});
  }
  // The two runs at the same step: the last validation step both reached.
  json same_step = nullptr;
  for (auto it = all_metrics[0].rbegin(); it != all_metrics[0].rend() && same_step.is_null(); ++it)
    for (const auto& u : all_metrics[1])
      if (u.step == it->step) {
        same_step = {{"step", u.step}, {"masked_train_loss", it->train_loss}, {"unmasked_train_loss", u.train_loss},
                     {"masked_valid_loss", it->valid_loss}, {"unmasked_valid_loss", u.valid_loss},
                     {"masked_valid_bleu", it->valid_bleu}, {"unmasked_valid_bleu", u.valid_bleu}};
        break;
      }
  rep.figures = {{"runs", runs}, {"minutes", opt.minutes}, {"early_stopping_metric", "ppl"}, {"same_step", same_step}};
  rep.table_html = html_table({"run", "causal mask", "steps", "lowest training loss", "lowest validation loss (teacher-forced)",
                               "best validation BLEU (greedy)", "test BLEU (greedy)", "ended by"},
                              rows);
  const std::string dir = opt.out + "/" + rep.name;
  make_dirs(dir);
  ChartSpec lc{"loss with the reference as input", "training step", "cross-entropy (nats)", loss_s, {}, 520, 320};
  ChartSpec bc{"greedy BLEU on the validation set", "training step", "BLEU", bleu_s, {}, 420, 320};
  write_file_atomic(dir + "/curves.svg", chart_row_svg({lc, bc}));
  rep.charts = {"curves.svg"};
  const json &m = runs[0], &u = runs[1];
  std::ostringstream f;
  f << "Under the same budget (" << num(opt.minutes, 1) << " min each, stopping early on the teacher-forced validation loss)";
  if (!same_step.is_null()) {
    const json& s = same_step;
    f << ", at step " << s["step"].get<int64_t>() << " the decoder without the causal mask has a training loss of "
      << num(s["unmasked_train_loss"].get<double>(), 3) << " against the masked model's " << num(s["masked_train_loss"].get<double>(), 3)
      << " (" << num(s["masked_train_loss"].get<double>() / std::max(1e-12, s["unmasked_train_loss"].get<double>()), 1)
      << "x lower) and a validation loss of " << num(s["unmasked_valid_loss"].get<double>(), 3) << " against "
      << num(s["masked_valid_loss"].get<double>(), 3) << " (validation, too, hands it the next words), while its greedy validation BLEU is "
      << num(s["unmasked_valid_bleu"].get<double>()) << " against " << num(s["masked_valid_bleu"].get<double>());
  }
  f << ". Over the whole run its lowest training loss is " << num(u["lowest_train_loss"].get<double>(), 3) << " (masked "
    << num(m["lowest_train_loss"].get<double>(), 3) << "), its best greedy validation BLEU " << num(u["best_valid_bleu_greedy"].get<double>())
    << " (masked " << num(m["best_valid_bleu_greedy"].get<double>()) << ") and its greedy test BLEU "
    << num(u["test_bleu_greedy"].get<double>()) << " (masked " << num(m["test_bleu_greedy"].get<double>())
    << "): at decoding time there are no next words to copy. The unmasked run ended by " << u["ended_by"].get<std::string>()
    << ", the masked one by " << m["ended_by"].get<std::string>() << ".";
  rep.finding = f.str();
  return rep;
}

}  // namespace attnmt::lab_detail
