#include "viz/progress.h"

#include <cstdio>
#include <sstream>

namespace attnmt {

namespace {
const char* kStyle =
    "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}section{border-top:1px solid #ccc;margin:1.5em 0;"
    "padding-top:1em}.src{color:#333}.tgt{color:#08306b}input[type=range]{width:min(600px,90%)}.step{font-weight:bold}"
    ".frame{display:none}.frame.on{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}figure.self{margin:0}"
    "figcaption{font-size:.85em;color:#555}</style>";

// Each inline SVG gets its own ids: several SVGs in one page must not share the colour scale's gradient id.
std::string unique_ids(std::string svg, const std::string& suffix) {
  const auto decl = svg.find("?>");
  if (svg.rfind("<?xml", 0) == 0 && decl != std::string::npos) svg.erase(0, decl + 2);
  const std::pair<std::string, std::string> swaps[] = {{"id=\"scale\"", "id=\"scale-" + suffix + "\""},
                                                      {"url(#scale)", "url(#scale-" + suffix + ")"}};
  for (const auto& [from, to] : swaps)
    for (size_t p = svg.find(from); p != std::string::npos; p = svg.find(from, p + to.size())) svg.replace(p, from.size(), to);
  return svg;
}
}  // namespace

namespace {
nlohmann::json self_json(const AttentionMap& m) { return {{"layer", m.self_attention}, {"tokens", m.src_tokens}, {"weights", m.weights}}; }
AttentionMap self_from_json(const nlohmann::json& j) {
  AttentionMap m;
  m.self_attention = j.at("layer").get<std::string>();
  m.src_tokens = m.tgt_tokens = j.at("tokens").get<std::vector<std::string>>();
  m.weights = j.at("weights").get<std::vector<std::vector<float>>>();
  return m;
}
}  // namespace

nlohmann::json progress_snapshot_json(const ProgressSnapshot& s) {
  nlohmann::json j = {{"step", s.step}, {"epoch", s.epoch}, {"valid_bleu", s.valid_bleu}, {"sentences", nlohmann::json::array()}};
  for (size_t k = 0; k < s.maps.size(); ++k) {
    const AttentionMap& m = s.maps[k];
    nlohmann::json e = {{"source", m.source_text}, {"target", m.target_text}, {"src_tokens", m.src_tokens},
                        {"tgt_tokens", m.tgt_tokens}, {"weights", m.weights}};
    if (k < s.encoder_self.size()) e["encoder_self"] = self_json(s.encoder_self[k]);
    if (k < s.decoder_self.size()) e["decoder_self"] = self_json(s.decoder_self[k]);
    j["sentences"].push_back(std::move(e));
  }
  return j;
}

ProgressSnapshot progress_snapshot_from_json(const nlohmann::json& j) {
  ProgressSnapshot s;
  s.step = j.at("step").get<int64_t>();
  s.epoch = j.at("epoch").get<int64_t>();
  s.valid_bleu = j.at("valid_bleu").get<double>();
  for (const auto& e : j.at("sentences")) {
    AttentionMap m;
    m.source_text = e.at("source").get<std::string>();
    m.target_text = e.at("target").get<std::string>();
    m.src_tokens = e.at("src_tokens").get<std::vector<std::string>>();
    m.tgt_tokens = e.at("tgt_tokens").get<std::vector<std::string>>();
    m.weights = e.at("weights").get<std::vector<std::vector<float>>>();
    s.maps.push_back(std::move(m));
    if (e.contains("encoder_self")) s.encoder_self.push_back(self_from_json(e.at("encoder_self")));
    if (e.contains("decoder_self")) s.decoder_self.push_back(self_from_json(e.at("decoder_self")));
  }
  return s;
}

std::string progress_html(const std::vector<ProgressSnapshot>& all, const std::string& title) {
  // At most kMaxFrames snapshots, evenly spread, the first and the last included: the page stays a few MB.
  constexpr size_t kMaxFrames = 16;
  std::vector<ProgressSnapshot> snapshots;
  if (all.size() <= kMaxFrames) {
    snapshots = all;
  } else {
    for (size_t k = 0; k < kMaxFrames; ++k) snapshots.push_back(all[k * (all.size() - 1) / (kMaxFrames - 1)]);
  }
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title) << "</title>\n"
    << kStyle << "</head><body>\n<h1>" << xml_escape(title) << "</h1>\n";
  o << "<p>" << all.size() << " validation(s)" << (all.size() > snapshots.size() ? ", " + std::to_string(snapshots.size()) + " of them shown" : std::string())
    << ". The attention of the model on fixed validation sentences (forcing the "
       "reference) at each validation: move the slider to watch the alignment emerge. Rows are target tokens, columns "
       "source tokens; darker = more attention.</p>\n";
  const size_t sentences = snapshots.empty() ? 0 : snapshots.front().maps.size();
  for (size_t k = 0; k < sentences; ++k) {
    const AttentionMap& first = snapshots.front().maps[k];
    o << "<section id=\"sentence" << k + 1 << "\"><p><span class=\"src\">" << xml_escape(first.source_text)
      << "</span><br><span class=\"tgt\">" << xml_escape(first.target_text) << "</span></p>\n";
    o << "<p><input type=\"range\" min=\"0\" max=\"" << snapshots.size() - 1 << "\" value=\"" << snapshots.size() - 1
      << "\" aria-label=\"validation\" oninput=\"show(this)\"> <span class=\"step\"></span></p>\n";
    for (size_t i = 0; i < snapshots.size(); ++i) {
      const ProgressSnapshot& s = snapshots[i];
      if (k >= s.maps.size()) continue;
      char label[128];
      std::snprintf(label, sizeof(label), "step %lld (epoch %lld), validation BLEU %.2f", static_cast<long long>(s.step),
                    static_cast<long long>(s.epoch), s.valid_bleu);
      o << "<div class=\"frame" << (i + 1 == snapshots.size() ? " on" : "") << "\" data-step=\"" << s.step << "\" data-label=\""
        << xml_escape(label) << "\">" << unique_ids(attention_svg(s.maps[k]), std::to_string(k) + "-" + std::to_string(i));
    // A self-attention model: its stacks' last layers beside the cross-attention (the diagonal, the causal triangle).
    for (const auto* self : {&s.encoder_self, &s.decoder_self})
      if (k < self->size())
        o << "<figure class=\"self\"><figcaption>self-attention, " << xml_escape((*self)[k].self_attention) << " (mean of its heads)</figcaption>"
          << unique_ids(attention_svg((*self)[k]), std::to_string(k) + "-" + std::to_string(i) + (self == &s.encoder_self ? "-e" : "-d"))
          << "</figure>";
    o << "</div>\n";
    }
    o << "</section>\n";
  }
  o << "<script>\n"
       "function show(r){var f=r.closest('section').querySelectorAll('.frame');"
       "f.forEach(function(d,i){d.classList.toggle('on',i==r.value);});"
       "r.nextElementSibling.textContent=f[r.value]?f[r.value].dataset.label:'';}\n"
       "document.querySelectorAll('input[type=range]').forEach(show);\n"
       "</script>\n</body></html>\n";
  return o.str();
}

std::string progress_html_without_attention(const std::string& title) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title) << "</title>\n"
    << kStyle << "</head><body>\n<h1>" << xml_escape(title) << "</h1>\n"
    << "<p>This model has no attention, so there is nothing to show here: its decoder sees one fixed context vector, the "
       "encoder's final state, at every step, whatever the sentence's length. That vector is the bottleneck that "
       "attention relieves; compare the BLEU by source length of this run with an attention model's "
       "(<code>attnmt compare</code>).</p>\n</body></html>\n";
  return o.str();
}

}  // namespace attnmt
