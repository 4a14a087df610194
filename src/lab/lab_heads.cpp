// The lab's experiment "heads". Heads: what each head of a multi-head model attends to.
#include "lab/lab_common.h"

#include <algorithm>
#include <sstream>

#include "common/host.h"
#include "eval/aer.h"
#include "lab/measures.h"
#include "run/run_dir.h"
#include "translate/alignment.h"
#include "translate/translator.h"

namespace attnmt::lab_detail {
using nlohmann::json;

LabReport heads(const LabOptions& opt) {
  LabReport rep;
  rep.name = "heads";
  rep.title = "Heads: what each head of multi-head attention looks at";
  rep.claim = "the heads of multi-head attention specialise: some align, others spread out or look elsewhere.";
  json models = json::array();
  std::vector<std::vector<std::string>> rows;
  std::ostringstream f;
  for (int h : {4, 8}) {
    const std::string name = "scaled_dot_h" + std::to_string(h);
    LabRun r = train_or_reuse(opt, name, lab_config(opt, name, "scaled_dot.json", budget(opt.minutes, opt, {[h](Config& c) { c.model.attention.heads = h; }})));
    const EvalResult e = test_eval(r, 5);
    LoadedRun run = load_run(r.dir(), "best", opt.device);
    const TestSet test = read_test_set(run.cfg);
    std::vector<torch::Tensor> hw;
    const auto mean_maps = forced_attention(run, test.src_tok, test.ref_tok, &hw);
    json per = json::array();
    std::vector<double> aers;
    for (int k = 0; k < h; ++k) {
      AerCounts c;
      RowStats rs_total;
      double ent = 0, mx = 0, diag = 0;
      int64_t rows_n = 0, maps = 0;
      for (size_t i = 0; i < hw.size(); ++i) {
        if (!hw[i].defined()) continue;
        const HostTensor m = to_host(hw[i][k], torch::kFloat);  // [T, S]
        std::vector<std::vector<float>> map;
        for (int64_t t = 0; t < m.size(0); ++t) map.push_back(m.values<float>(t * m.size(1), (t + 1) * m.size(1)));
        if (!test.align.empty()) c.add(aer_counts(hard_alignment(map), test.align[i]));
        const RowStats rs = row_stats(map);
        ent += rs.mean_entropy * static_cast<double>(rs.rows);
        mx += rs.mean_max * static_cast<double>(rs.rows);
        rows_n += rs.rows;
        diag += diagonal_distance(map);
        ++maps;
      }
      const double aer = c.aer(), entropy = rows_n ? ent / static_cast<double>(rows_n) : 0.0,
                   mean_max = rows_n ? mx / static_cast<double>(rows_n) : 0.0, dd = maps ? diag / static_cast<double>(maps) : 0.0;
      aers.push_back(aer);
      per.push_back({{"head", k}, {"aer", aer}, {"entropy", entropy}, {"mean_max_weight", mean_max}, {"diagonal_distance", dd}});
      rows.push_back({name, std::to_string(k), num(aer, 3), num(entropy, 3), num(mean_max, 3), num(dd, 2)});
    }
    const RowStats mean_rs = [&] {
      std::vector<std::vector<float>> all;
      for (const auto& m : mean_maps) all.insert(all.end(), m.begin(), m.end());
      return row_stats(all);
    }();
    rows.push_back({name, "mean of heads", e.aer ? num(*e.aer, 3) : "-", num(mean_rs.mean_entropy, 3), num(mean_rs.mean_max, 3), ""});
    models.push_back({{"name", name}, {"heads", h}, {"test_bleu", e.bleu}, {"aer_mean_of_heads", e.aer ? json(*e.aer) : json(nullptr)},
                      {"per_head", per}, {"ended_by", RunDir(r.dir()).read_train_summary() ? RunDir(r.dir()).read_train_summary()->ended_by : ""}});
    // The finding for this model: the best aligned and the most diffuse head, and how many align better than the mean.
    size_t best = 0, diffuse = 0, far = 0;
    int better = 0, aligners = 0, strays = 0;
    for (size_t k = 0; k < per.size(); ++k) {
      aligners += per[k]["aer"].get<double>() < 0.15;
      strays += per[k]["diagonal_distance"].get<double>() > 5.0;
      if (per[k]["aer"].get<double>() < per[best]["aer"].get<double>()) best = k;
      if (per[k]["entropy"].get<double>() > per[diffuse]["entropy"].get<double>()) diffuse = k;
      if (per[k]["diagonal_distance"].get<double>() > per[far]["diagonal_distance"].get<double>()) far = k;
      if (e.aer && per[k]["aer"].get<double>() < *e.aer) ++better;
    }
    f << "With " << h << " heads (test BLEU " << num(e.bleu) << "), head " << best << " aligns best (AER "
      << num(per[best]["aer"].get<double>(), 3) << ", the mean of the heads " << (e.aer ? num(*e.aer, 3) : "-") << "), head " << diffuse
      << " is the most diffuse (entropy " << num(per[diffuse]["entropy"].get<double>(), 2) << " nats, against "
      << num(per[best]["entropy"].get<double>(), 2) << "), head " << far << " strays furthest from the diagonal ("
      << num(per[far]["diagonal_distance"].get<double>(), 1) << " positions on average); AER ranges from "
      << num(*std::min_element(aers.begin(), aers.end()), 3) << " to " << num(*std::max_element(aers.begin(), aers.end()), 3) << "; "
      << better << " of the " << h << " heads align better than their mean, " << aligners << " are aligners (AER below 0.15) and "
      << strays << " look elsewhere (more than 5 positions from the diagonal on average). ";
  }
  rep.figures = {{"models", models}};
  rep.table_html = html_table({"model", "head", "AER", "entropy (nats)", "mean max weight", "distance from the diagonal"}, rows);
  rep.finding = f.str();
  return rep;
}

}  // namespace attnmt::lab_detail
