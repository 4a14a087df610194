#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/errors.h"
#include "common/fs.h"
#include "eval/evaluator.h"
#include "model/attention.h"
#include "run/loaded_run.h"
#include "run/run_dir.h"
#include "translate/translator.h"
#include "viz/attention_maps.h"
#include "viz/charts.h"

namespace attnmt {

namespace fs = std::filesystem;

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string describe_attention(const ModelConfig& m) {
  const auto& a = m.attention;
  const std::string experiment = std::string(a.scale ? "" : "+unscaled") + (a.mask ? "" : "+unmasked") +
                                 (m.encoder.type == LayerType::kSelfAttention ? "+self_attention encoder" : "") +
                                 (m.decoder.type == LayerType::kSelfAttention ? "+self_attention decoder" : "") +
                                 (m.decoder.causal_mask ? "" : "+no causal mask");
  const AttentionTraits t = attention_traits(a);
  return t.summary + (t.after_rnn && m.input_feeding ? "+feeding" : "") + experiment;
}

std::string bucket_label(const BucketScore& b) {
  return std::to_string(b.min) + "-" + (b.max < 0 ? std::string("") : std::to_string(b.max));
}

// The shortest and the longest length buckets that hold at least 5% of the sentences: a bucket of one or
// two sentences (Multi30k's test set has one source over 30 tokens) says nothing about long sentences.
std::pair<const BucketScore*, const BucketScore*> ends(const RunSummary& r) {
  const BucketScore *first = nullptr, *last = nullptr;
  int64_t total = 0;
  for (const auto& b : r.eval.by_length) total += b.count;
  const int64_t enough = std::max<int64_t>(1, (total + 19) / 20);
  for (const auto& b : r.eval.by_length)
    if (b.count >= enough) {
      if (!first) first = &b;
      last = &b;
    }
  return {first, last};
}
}  // namespace

RunSummary summarize_run(const std::string& dir, const std::string& split, const std::string& device) {
  RunSummary s;
  s.dir = dir;
  s.name = fs::path(dir).filename().string();
  if (s.name.empty()) s.name = fs::path(dir).parent_path().filename().string();
  const RunDir rd(dir);
  LoadedRun run = load_run(dir, "best", device);
  s.attention = describe_attention(run.cfg.model);
  s.parameters = run.model->parameter_count();
  if (!fs::is_regular_file(rd.eval_json(split))) {
    spdlog::info("{}: no {} evaluation yet; running it (beam {})", dir, split, run.cfg.eval.beam_size);
    EvalRequest req;
    req.split = split;
    evaluate_run(run, dir, req);
  }
  s.eval = rd.read_eval(split);
  for (const auto& m : rd.read_metrics()) {
    s.train_s = m.elapsed_s;
    s.epochs = m.epoch;
    s.steps = m.step;
  }
  if (auto ts = rd.read_train_summary()) s.ended_by = ts->ended_by;
  if (fs::is_regular_file(rd.maps_index())) s.maps = rd.maps_index();
  if (fs::is_regular_file(rd.progress_index())) s.progress = rd.progress_index();
  // The longest source sentence of the split, for the report's side-by-side view.
  const SplitConfig& files = split == "test" ? run.cfg.data.test : run.cfg.data.valid;
  if (!files.src.empty() && fs::is_regular_file(files.src) && fs::is_regular_file(files.tgt) &&
      fs::is_regular_file(rd.eval_hyp(split))) {
    const std::vector<std::string> srcs = read_lines(files.src), refs = read_lines(files.tgt), hyps = read_lines(rd.eval_hyp(split));
    if (srcs.size() == refs.size() && srcs.size() == hyps.size() && !srcs.empty()) {
      size_t best = 0, best_len = 0;
      for (size_t i = 0; i < srcs.size(); ++i) {
        const size_t n = run.tok.words(srcs[i]).size();
        if (n > best_len) best = i, best_len = n;
      }
      auto& l = s.longest;
      l.line = static_cast<int64_t>(best);
      l.source = srcs[best];
      l.reference = refs[best];
      l.translation = hyps[best];
      if (run.model->decoder->has_attention()) {
        AttentionMap m;
        m.src_tokens = run.tok.encode(srcs[best], Side::kSource);
        m.tgt_tokens = run.tok.encode(refs[best], Side::kTarget);
        m.weights = forced_attention(run, {m.src_tokens}, {m.tgt_tokens})[0];
        m.source_text = l.source;
        m.target_text = l.reference;
        l.map = std::move(m);
      }
    }
  }
  return s;
}

std::string comparison_paragraph(const std::vector<RunSummary>& runs) {
  if (runs.empty()) return "No runs.";
  std::ostringstream o;
  const RunSummary* best = &runs[0];
  for (const auto& r : runs)
    if (r.eval.bleu > best->eval.bleu) best = &r;
  o << "Highest test BLEU: " << best->name << " (" << best->attention << ", " << fmt("%.2f", best->eval.bleu) << "). ";
  // Long vs short sentences, per run.
  const RunSummary *worst_ratio = nullptr, *best_ratio = nullptr;
  double wr = 1e9, br = -1e9;
  for (const auto& r : runs) {
    auto [first, last] = ends(r);
    if (!first || first == last) continue;
    double ratio = first->bleu > 0 ? last->bleu / first->bleu : 0.0;
    o << r.name << " keeps " << fmt("%.0f", 100 * ratio) << "% of its BLEU from sources of " << bucket_label(*first)
      << " words to sources of " << bucket_label(*last) << " words (" << fmt("%.1f", first->bleu) << " to "
      << fmt("%.1f", last->bleu) << "). ";
    if (ratio < wr) wr = ratio, worst_ratio = &r;
    if (ratio > br) br = ratio, best_ratio = &r;
  }
  if (worst_ratio && best_ratio && worst_ratio != best_ratio) {
    auto [wf, wl] = ends(*worst_ratio);
    auto [bf, bl] = ends(*best_ratio);
    o << "On the longest sentences " << best_ratio->name << " scores " << fmt("%.1f", bl->bleu - wl->bleu)
      << " BLEU points more than " << worst_ratio->name << "; on the shortest the gap is "
      << fmt("%.1f", bf->bleu - wf->bleu) << " points.";
  }
  return o.str();
}

std::string comparison_table_text(const std::vector<RunSummary>& runs) {
  if (runs.empty()) return "";
  // Every run's column is as wide as the longest run name (at least 12), so names are never cut.
  int w = 12;
  for (const auto& r : runs) w = std::max(w, static_cast<int>(r.name.size()));
  std::ostringstream o;
  char buf[64];
  auto cell = [&](const char* f, auto v) {
    std::snprintf(buf, sizeof(buf), f, w, v);
    o << buf;
  };
  std::snprintf(buf, sizeof(buf), "%-14s %6s", "source words", "count");
  o << buf;
  for (const auto& r : runs) o << ' ' << std::string(static_cast<size_t>(w) - r.name.size(), ' ') << r.name;
  o << "\n";
  for (size_t k = 0; k < runs[0].eval.by_length.size(); ++k) {
    const BucketScore& b = runs[0].eval.by_length[k];
    std::snprintf(buf, sizeof(buf), "%-14s %6lld", bucket_label(b).c_str(), static_cast<long long>(b.count));
    o << buf;
    for (const auto& r : runs) cell(" %*.2f", k < r.eval.by_length.size() ? r.eval.by_length[k].bleu : 0.0);
    o << "\n";
  }
  std::snprintf(buf, sizeof(buf), "%-21s", "BLEU (all)");
  o << buf;
  for (const auto& r : runs) cell(" %*.2f", r.eval.bleu);
  o << "\n";
  std::snprintf(buf, sizeof(buf), "%-21s", "longest / shortest");
  o << buf;
  for (const auto& r : runs) {
    auto [first, last] = ends(r);
    if (first && last && first != last && first->bleu > 0) {
      std::snprintf(buf, sizeof(buf), " %*.0f%%", w - 1, 100 * last->bleu / first->bleu);
      o << buf;
    } else {
      cell(" %*s", "-");
    }
  }
  o << "\n";
  if (std::any_of(runs.begin(), runs.end(), [](const RunSummary& r) { return !r.ended_by.empty(); })) {
    std::snprintf(buf, sizeof(buf), "%-21s", "ended by");
    o << buf;
    for (const auto& r : runs)
      cell(" %*s", r.ended_by.empty() ? "?" : r.ended_by == "early stopping" ? "early stop" : r.ended_by.c_str());
    o << "\n";
  }
  return o.str();
}

namespace {

// The length buckets' labels, from the first run; every run must use the same buckets to share the chart.
std::vector<std::string> shared_bucket_labels(const std::vector<RunSummary>& runs) {
  std::vector<std::string> labels;
  for (const auto& b : runs[0].eval.by_length) labels.push_back(bucket_label(b));
  for (const auto& r : runs) {
    std::vector<std::string> l;
    for (const auto& b : r.eval.by_length) l.push_back(bucket_label(b));
    if (l != labels)
      throw UsageError("compare: " + r.dir + " uses different length buckets than " + runs[0].dir + "; evaluate them alike");
  }
  return labels;
}

void write_comparison_json(const std::string& out, const std::vector<RunSummary>& runs, const std::string& split,
                           const std::string& paragraph) {
  nlohmann::json j = {{"split", split}, {"summary", paragraph}, {"runs", nlohmann::json::array()}};
  for (const auto& r : runs) {
    nlohmann::json e = r.eval.to_json();
    j["runs"].push_back({{"run", r.dir},       {"name", r.name},         {"attention", r.attention},
                         {"parameters", r.parameters}, {"train_s", r.train_s}, {"epochs", r.epochs},
                         {"steps", r.steps},  {"ended_by", r.ended_by}, {"eval", e}});
  }
  write_file_atomic(out + "/report.json", j.dump(2) + "\n");
}

void write_comparison_md(const std::string& out, const std::vector<RunSummary>& runs, const std::string& split,
                         const std::string& paragraph, const std::vector<std::string>& labels) {
  std::ostringstream md;
  md << "# attnmt comparison (" << split << " set)\n\n";
  md << "| run | attention | parameters | train min | epochs | ended by | BLEU | chrF | AER |";
  for (const auto& l : labels) md << " BLEU " << l << " |";
  md << "\n|---|---|---|---|---|---|---|---|---|";
  for (size_t k = 0; k < labels.size(); ++k) md << "---|";
  md << "\n";
  for (const auto& r : runs) {
    md << "| " << r.name << " | " << r.attention << " | " << r.parameters << " | " << fmt("%.1f", r.train_s / 60) << " | "
       << r.epochs << " | " << (r.ended_by.empty() ? std::string("?") : r.ended_by) << " | " << fmt("%.2f", r.eval.bleu) << " | "
       << fmt("%.2f", r.eval.chrf) << " | "
       << (r.eval.aer ? fmt("%.3f", *r.eval.aer) : std::string("–")) << " |";
    for (const auto& b : r.eval.by_length) md << " " << fmt("%.2f", b.bleu) << " |";
    md << "\n";
  }
  md << "\nSentences per bucket:";
  for (const auto& b : runs[0].eval.by_length) md << " " << bucket_label(b) << ": " << b.count << ";";
  md << " beam " << runs[0].eval.beam_size << ".\n\n" << paragraph << "\n\n![BLEU by source length](bleu_by_length.svg)\n";
  write_file_atomic(out + "/report.md", md.str());
}

void write_length_chart(const std::string& out, const std::vector<RunSummary>& runs, const std::string& split,
                        const std::vector<std::string>& labels) {
  ChartSpec c;
  c.title = "BLEU by source sentence length (" + split + ")";
  c.x_label = "source length (words)";
  c.y_label = "BLEU";
  c.x_tick_labels = labels;
  c.width = 640;
  c.height = 420;
  for (const auto& r : runs) {
    Series s{r.name + " (" + r.attention + ")", {}, {}};
    for (size_t k = 0; k < r.eval.by_length.size(); ++k) {
      s.x.push_back(static_cast<double>(k));
      s.y.push_back(r.eval.by_length[k].count > 0 ? r.eval.by_length[k].bleu : std::nan(""));
    }
    c.series.push_back(std::move(s));
  }
  write_file_atomic(out + "/bleu_by_length.svg", line_chart_svg(c));
}

// The runs' table of index.html.
void comparison_table_html(std::ostringstream& h, const std::string& out, const std::vector<RunSummary>& runs,
                           const std::vector<std::string>& labels) {
  h << "<img src=\"bleu_by_length.svg\" alt=\"BLEU by source length\">\n<table><tr><th>run</th><th>attention</th>"
       "<th>parameters</th><th>train min</th><th>epochs</th><th>ended by</th><th>BLEU</th><th>chrF</th><th>AER</th>";
  for (const auto& l : labels) h << "<th>" << xml_escape(l) << "</th>";
  h << "<th>attention maps</th><th>during training</th></tr>\n";
  for (const auto& r : runs) {
    h << "<tr><td>" << xml_escape(r.name) << "</td><td>" << xml_escape(r.attention) << "</td><td>" << r.parameters << "</td><td>"
      << fmt("%.1f", r.train_s / 60) << "</td><td>" << r.epochs << "</td><td>" << xml_escape(r.ended_by.empty() ? "?" : r.ended_by)
      << "</td><td>" << fmt("%.2f", r.eval.bleu) << "</td><td>"
      << fmt("%.2f", r.eval.chrf) << "</td><td>" << (r.eval.aer ? fmt("%.3f", *r.eval.aer) : std::string("&ndash;")) << "</td>";
    for (const auto& b : r.eval.by_length) h << "<td>" << fmt("%.2f", b.bleu) << "</td>";
    std::error_code ec;
    std::string link = r.maps.empty() ? "" : fs::relative(fs::absolute(r.maps), fs::absolute(out), ec).string();
    h << "<td>" << (link.empty() ? std::string("&ndash;") : "<a href=\"" + xml_escape(link) + "\">gallery</a>") << "</td>";
    std::string plink = r.progress.empty() ? "" : fs::relative(fs::absolute(r.progress), fs::absolute(out), ec).string();
    h << "<td>" << (plink.empty() ? std::string("&ndash;") : "<a href=\"" + xml_escape(plink) + "\">snapshots</a>") << "</td></tr>\n";
  }
  h << "</table>\n";
}

// The longest sentence: every run's translation next to the reference, and the attention maps (written beside).
void longest_sentence_html(std::ostringstream& h, const std::string& out, const std::vector<RunSummary>& runs,
                           const std::string& split) {
  if (runs[0].longest.line >= 0) {
    const auto& l0 = runs[0].longest;
    h << "<h2>The longest " << xml_escape(split) << " sentence (line " << l0.line + 1 << ")</h2>\n<table><tr><th>source</th><td style=\"text-align:left\">"
      << xml_escape(l0.source) << "</td></tr>\n<tr><th>reference</th><td style=\"text-align:left\">" << xml_escape(l0.reference) << "</td></tr>\n";
    for (const auto& r : runs)
      if (r.longest.line == l0.line)
        h << "<tr><th>" << xml_escape(r.name) << "</th><td style=\"text-align:left\">" << xml_escape(r.longest.translation) << "</td></tr>\n";
    h << "</table>\n";
    for (size_t k = 0; k < runs.size(); ++k) {
      const RunSummary& r = runs[k];
      if (r.longest.line != l0.line) continue;
      if (!r.longest.map) {
        h << "<p><b>" << xml_escape(r.name) << "</b>: no attention map; its decoder sees one fixed vector for the whole sentence.</p>\n";
        continue;
      }
      const std::string file = "longest_" + std::to_string(k + 1) + ".svg";
      write_file_atomic(out + "/" + file, attention_svg(*r.longest.map));
      h << "<p><b>" << xml_escape(r.name) << "</b>: attention forcing the reference (rows: reference tokens, columns: source tokens)</p>\n"
        << "<img src=\"" << xml_escape(file) << "\" alt=\"attention map of " << xml_escape(r.name) << "\" style=\"max-width:100%\">\n";
    }
  }
}

}  // namespace

void write_comparison(const std::string& out, const std::vector<RunSummary>& runs, const std::string& split) {
  if (runs.empty()) throw UsageError("compare: give at least one run directory");
  make_dirs(out);
  const std::vector<std::string> labels = shared_bucket_labels(runs);
  const std::string paragraph = comparison_paragraph(runs);
  write_comparison_json(out, runs, split, paragraph);
  write_comparison_md(out, runs, split, paragraph, labels);
  write_length_chart(out, runs, split, labels);

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnmt comparison</title><style>"
       "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
       "padding:4px 8px;text-align:right}td:first-child,td:nth-child(2){text-align:left}</style></head><body>\n";
  h << "<h1>attnmt comparison (" << xml_escape(split) << " set)</h1>\n<p>" << xml_escape(paragraph) << "</p>\n";
  comparison_table_html(h, out, runs, labels);
  longest_sentence_html(h, out, runs, split);
  h << "<p>Details: <a href=\"report.md\">report.md</a>, <a href=\"report.json\">report.json</a>.</p></body></html>\n";
  write_file_atomic(out + "/index.html", h.str());
}

}  // namespace attnmt
