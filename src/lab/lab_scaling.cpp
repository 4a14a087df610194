// The lab's experiment "scaling". Scaling: why scaled dot-product attention divides by the square root of the key width.
#include "lab/lab_common.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/config.h"
#include "common/fs.h"
#include "common/host.h"
#include "data/text.h"

#include "model/loss.h"
#include "run/loaded_run.h"
#include "run/run_dir.h"
#include "train/trainer.h"
#include "viz/charts.h"

namespace attnmt::lab_detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The statistics of a scaled dot-product model's scores on a probe batch: forward, loss, backward.
struct ScoreProbe {
  double variance = 0;      // mean over query rows of the variance of the scores over the real source positions
  double mean_max = 0;      // mean largest weight
  double entropy = 0;       // mean row entropy (nats)
  double grad_norm = 0;     // L2 norm of d loss / d scores over the probe batch (loss per target token)
};

ScoreProbe probe_scores(Seq2Seq& model, const Batch& cpu_batch, const torch::Device& device) {
  AttentionImpl* att = model->decoder->attention();
  TORCH_CHECK(att, "probe_scores: the model has no attention");
  model->eval();
  const Batch b = cpu_batch.to(device);
  std::vector<torch::Tensor> sink;  // each attend()'s scores before the softmax, their gradient retained
  att->observe([&sink](const torch::Tensor&, const AttentionMemory&, const AttentionOutput& out) {
    torch::Tensor scores = out.scores;
    if (scores.requires_grad()) scores.retain_grad();
    sink.push_back(scores);
  });
  {
    torch::AutoGradMode on(true);
    BatchLoss bl = batch_loss(model, b, 0.0);
    (bl.sum / static_cast<double>(b.tgt_tokens)).backward();
  }
  att->observe(nullptr);
  TORCH_CHECK(!sink.empty(), "probe_scores: no scores were recorded");
  torch::Tensor x = torch::cat(sink, -2);  // [B, h, T, S]
  torch::Tensor g = sink.size() == 1 ? sink[0].grad() : torch::Tensor();
  if (sink.size() > 1) {
    std::vector<torch::Tensor> gs;
    for (auto& s : sink) gs.push_back(s.grad().defined() ? s.grad() : torch::zeros_like(s));
    g = torch::cat(gs, -2);
  }
  model->zero_grad();
  x = to_host(x.detach(), torch::kDouble).tensor();
  if (x.dim() == 3) x = x.unsqueeze(1);
  const torch::Tensor src_mask = to_host(b.src_mask, torch::kBool).tensor();
  const torch::Tensor src = src_mask.to(torch::kDouble).unsqueeze(1).unsqueeze(1);  // [B, 1, 1, S]
  const torch::Tensor rows = to_host(b.tgt_mask, torch::kDouble).tensor().unsqueeze(1).expand({x.size(0), x.size(1), x.size(2)});
  const torch::Tensor n = src.sum(-1);  // [B, 1, 1]
  const torch::Tensor mean = (x * src).sum(-1) / n;
  const torch::Tensor var = ((x - mean.unsqueeze(-1)).pow(2) * src).sum(-1) / n;  // [B, h, T]
  const torch::Tensor w = masked_softmax(x, src_mask);
  const torch::Tensor wmax = std::get<0>(w.max(-1));
  const torch::Tensor ent = -(w * w.clamp_min(1e-300).log()).sum(-1);
  const double count = cpu_scalar<double>(rows.sum());
  ScoreProbe p;
  p.variance = cpu_scalar<double>((var * rows).sum()) / count;
  p.mean_max = cpu_scalar<double>((wmax * rows).sum()) / count;
  p.entropy = cpu_scalar<double>((ent * rows).sum()) / count;
  if (g.defined()) {
    torch::Tensor gm = to_host(g, torch::kDouble).tensor();
    if (gm.dim() == 3) gm = gm.unsqueeze(1);
    p.grad_norm = cpu_scalar<double>((gm * src * rows.unsqueeze(-1)).norm());
  }
  return p;
}

// The first n validation pairs of a run, encoded with its vocabularies, as one batch.
Batch probe_batch(const LoadedRun& run, size_t n) {
  const auto src = read_lines(run.cfg.data.valid.src), tgt = read_lines(run.cfg.data.valid.tgt);
  std::vector<EncodedPair> data;
  std::vector<int64_t> idx;
  for (size_t i = 0; i < std::min({n, src.size(), tgt.size()}); ++i) {
    data.push_back({run.src_vocab.encode(split_whitespace(src[i])), run.tgt_vocab.encode(split_whitespace(tgt[i]))});
    idx.push_back(static_cast<int64_t>(i));
  }
  return make_batch(data, idx);
}

json probe_json(int64_t step, const ScoreProbe& p) {
  return {{"step", step}, {"score_variance", p.variance}, {"mean_max_weight", p.mean_max}, {"entropy", p.entropy},
          {"score_grad_norm", p.grad_norm}};
}

// The probe's statistics at initialisation (the model train() starts from: the same seed, the same vocabularies) and at
// each periodic checkpoint of the run.
json probe_curve(const LabOptions& opt, const LabRun& r) {
  LoadedRun best = load_run(r.dir(), "best", opt.device);
  const Batch probe = probe_batch(best, 64);
  json curve = json::array();
  torch::manual_seed(static_cast<uint64_t>(r.cfg.train.seed));
  Seq2Seq init(r.cfg.model, best.src_vocab.size(), best.tgt_vocab.size());
  init->to(best.device);
  curve.push_back(probe_json(0, probe_scores(init, probe, best.device)));
  for (const auto& ck : RunDir(r.dir()).periodic_checkpoints()) {
    LoadedRun at = load_run(r.dir(), ck, opt.device);
    const std::string stem = fs::path(ck).stem().string();  // ckpt-<step>
    curve.push_back(probe_json(std::stoll(stem.substr(5)), probe_scores(at.model, probe, at.device)));
  }
  return curve;
}

// Unscaled against scaled at each dimension (RUNS in pairs: scaled, unscaled). During training = the median over the
// checkpoints.
std::string scaling_finding(const json& runs, int steps) {
  auto median_over_training = [](const json& curve, const char* key) {
    std::vector<double> v;
    for (size_t i = 1; i < curve.size(); ++i) v.push_back(curve[i][key].get<double>());
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::ostringstream f;
  for (size_t k = 0; k + 1 < runs.size(); k += 2) {
    const json &s = runs[k], &u = runs[k + 1];
    const json &s0 = s["curve"].front(), &u0 = u["curve"].front();
    const double vr = u0["score_variance"].get<double>() / std::max(1e-300, s0["score_variance"].get<double>());
    const double gs = median_over_training(s["curve"], "score_grad_norm"), gu = median_over_training(u["curve"], "score_grad_norm");
    f << "At d_k = " << s["dim"].get<int>() << ", both start from the same weights, so leaving out the factor multiplies the score "
      << "variance at initialisation by exactly " << num(vr, 1) << "; the largest weight starts at "
      << num(s0["mean_max_weight"].get<double>(), 3) << " scaled vs " << num(u0["mean_max_weight"].get<double>(), 3)
      << " unscaled (the initial weights are small). During training the unscaled model's largest weight is "
      << num(median_over_training(u["curve"], "mean_max_weight"), 3) << " (median over the checkpoints; scaled "
      << num(median_over_training(s["curve"], "mean_max_weight"), 3) << "), its row entropy "
      << num(median_over_training(u["curve"], "entropy"), 3) << " nats (scaled " << num(median_over_training(s["curve"], "entropy"), 3)
      << "), and the gradient that reaches its scores " << sci(gu) << " against " << sci(gs) << " ("
      << num(gs / std::max(1e-300, gu), 1) << "x smaller); after " << steps << " steps test BLEU is " << num(s["test_bleu"].get<double>())
      << " scaled vs " << num(u["test_bleu"].get<double>()) << " unscaled. ";
  }
  return f.str();
}

}  // namespace

LabReport scaling(const LabOptions& opt) {
  LabReport rep;
  rep.name = "scaling";
  rep.title = "Scaling: why scaled dot-product attention divides by sqrt(d_k)";
  rep.claim = "without the 1/sqrt(d_k) factor the scores grow with the dimension, the softmax saturates and the gradient that "
              "reaches the scores vanishes.";
  const int steps = opt.scaling_steps;
  json runs = json::array();
  std::vector<std::vector<std::string>> rows;
  std::vector<Series> var_s, max_s, ent_s, grad_s;
  for (int dim : {64, 512})
    for (bool scale : {true, false}) {
      const std::string name = "sd" + std::to_string(dim) + (scale ? "" : "_unscaled");
      Config cfg = lab_config(opt, name, "scaled_dot.json",
                              {[dim, scale, steps](Config& c) {
                                c.model.attention.heads = 1;
                                c.model.attention.dim = dim;
                                c.model.attention.scale = scale;
                                c.train.epochs = 100000;
                                c.train.max_steps = steps;
                                c.train.early_stopping.patience = 0;
                                c.train.valid_every = std::max(1, steps / 6);
                                c.train.keep_checkpoints = 100;
                                c.train.snapshot_sentences = 0;
                              }});
      LabRun r = train_or_reuse(opt, name, cfg);
      const EvalResult e = test_eval(r, 5);
      const json curve = probe_curve(opt, r);
      const std::string label = "d=" + std::to_string(dim) + (scale ? " scaled" : " unscaled");
      Series v{label, {}, {}}, m{label, {}, {}}, h{label, {}, {}}, g{label, {}, {}};
      for (const auto& c : curve) {
        const double st = static_cast<double>(c["step"].get<int64_t>());
        v.x.push_back(st);
        v.y.push_back(std::log10(std::max(1e-12, c["score_variance"].get<double>())));
        m.x.push_back(st);
        m.y.push_back(c["mean_max_weight"].get<double>());
        h.x.push_back(st);
        h.y.push_back(c["entropy"].get<double>());
        g.x.push_back(st);
        g.y.push_back(std::log10(std::max(1e-12, c["score_grad_norm"].get<double>())));
      }
      var_s.push_back(v);
      max_s.push_back(m);
      ent_s.push_back(h);
      grad_s.push_back(g);
      const json& c0 = curve.front();
      const json& cl = curve.back();
      runs.push_back({{"name", name}, {"dim", dim}, {"scale", scale}, {"steps", steps}, {"test_bleu", e.bleu},
                      {"aer", e.aer ? json(*e.aer) : json(nullptr)}, {"curve", curve}});
      rows.push_back({name, std::to_string(dim), scale ? "yes" : "no", sci(c0["score_variance"].get<double>()),
                      num(c0["mean_max_weight"].get<double>(), 3), num(c0["entropy"].get<double>(), 3),
                      sci(c0["score_grad_norm"].get<double>()), sci(cl["score_variance"].get<double>()),
                      num(cl["mean_max_weight"].get<double>(), 3), num(cl["entropy"].get<double>(), 3),
                      sci(cl["score_grad_norm"].get<double>()), num(e.bleu), e.aer ? num(*e.aer, 3) : "-"});
    }
  rep.figures = {{"steps", steps}, {"probe_sentences", 64}, {"beam", 5}, {"runs", runs}};
  rep.table_html = html_table({"run", "d_k", "scaled", "init: score var", "max weight", "entropy", "grad norm", "end: score var",
                               "max weight", "entropy", "grad norm", "BLEU", "AER"},
                              rows);
  auto chart = [](const std::string& title, const std::string& y, std::vector<Series> s) {
    ChartSpec c;
    c.title = title;
    c.x_label = "training step";
    c.y_label = y;
    c.series = std::move(s);
    return c;
  };
  const std::string dir = opt.out + "/" + rep.name;
  make_dirs(dir);
  write_file_atomic(dir + "/scores.svg", chart_row_svg({chart("score variance", "log10 variance", var_s),
                                                        chart("largest weight", "mean max weight", max_s)}));
  write_file_atomic(dir + "/gradients.svg", chart_row_svg({chart("row entropy", "nats", ent_s),
                                                           chart("gradient at the scores", "log10 norm", grad_s)}));
  rep.charts = {"scores.svg", "gradients.svg"};
  rep.finding = scaling_finding(runs, steps);
  return rep;
}

}  // namespace attnmt::lab_detail
