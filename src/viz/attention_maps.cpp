#include "viz/attention_maps.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace attnmt {

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') o += "?";  // not allowed in XML 1.0
        else o.push_back(c);
    }
  }
  return o;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += "\"\"";
    else o.push_back(c);
  }
  return o + "\"";
}

std::string attention_json(const AttentionMap& m) {
  nlohmann::json j;
  j["src_tokens"] = m.src_tokens;
  j["tgt_tokens"] = m.tgt_tokens;
  j["weights"] = m.weights;
  if (!m.heads.empty()) j["heads"] = m.heads;
  if (m.gold) {
    j["gold"] = nlohmann::json::array();
    for (auto [s, t] : *m.gold) j["gold"].push_back({s, t});
  }
  if (m.aer) j["aer"] = *m.aer;
  if (!m.self_attention.empty()) j["self_attention"] = m.self_attention;  // rows queries, columns keys of one sequence
  return j.dump() + "\n";
}

std::string attention_csv(const AttentionMap& m) {
  std::ostringstream o;
  o << "";
  for (const auto& s : m.src_tokens) o << "," << csv_field(s);
  o << "\n";
  char buf[32];
  for (size_t j = 0; j < m.weights.size(); ++j) {
    o << csv_field(j < m.tgt_tokens.size() ? m.tgt_tokens[j] : std::string());
    for (float w : m.weights[j]) {
      std::snprintf(buf, sizeof(buf), ",%.6f", static_cast<double>(w));
      o << buf;
    }
    o << "\n";
  }
  return o.str();
}

namespace {

// White -> dark blue.
std::string colour(float w) {
  float t = std::clamp(w, 0.0f, 1.0f);
  int r = static_cast<int>(255 + (8 - 255) * t), g = static_cast<int>(255 + (48 - 255) * t),
      b = static_cast<int>(255 + (107 - 255) * t);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", r, g, b);
  return buf;
}

// Approximate rendered width of a label in pixels (code points x 7).
int label_px(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n * 7;
}

constexpr int kCell = 22;

// One heatmap panel at (x0, y0); returns its width.
int panel(std::ostringstream& o, const AttentionMap& m, const std::vector<std::vector<float>>& w, int x0, int y0,
          int left, int top, const std::string& title) {
  const int S = static_cast<int>(m.src_tokens.size()), T = static_cast<int>(w.size());
  o << "<g transform=\"translate(" << x0 << "," << y0 << ")\">\n";
  o << "<text x=\"" << left << "\" y=\"14\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  for (int i = 0; i < S; ++i) {
    int x = left + i * kCell + kCell / 2 + 4, y = top - 6;
    o << "<text x=\"" << x << "\" y=\"" << y << "\" transform=\"rotate(-60 " << x << " " << y << ")\">"
      << xml_escape(m.src_tokens[static_cast<size_t>(i)]) << "</text>\n";
  }
  for (int j = 0; j < T; ++j) {
    const std::string& label = j < static_cast<int>(m.tgt_tokens.size()) ? m.tgt_tokens[static_cast<size_t>(j)] : std::string();
    o << "<text x=\"" << left - 6 << "\" y=\"" << top + j * kCell + 15 << "\" text-anchor=\"end\">" << xml_escape(label)
      << "</text>\n";
    for (int i = 0; i < S && i < static_cast<int>(w[static_cast<size_t>(j)].size()); ++i) {
      float v = w[static_cast<size_t>(j)][static_cast<size_t>(i)];
      char val[16];
      std::snprintf(val, sizeof(val), "%.3f", static_cast<double>(v));
      o << "<rect x=\"" << left + i * kCell << "\" y=\"" << top + j * kCell << "\" width=\"" << kCell << "\" height=\""
        << kCell << "\" fill=\"" << colour(v) << "\"><title>" << xml_escape(label) << " / "
        << xml_escape(m.src_tokens[static_cast<size_t>(i)]) << ": " << val << "</title></rect>\n";
    }
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << S * kCell << "\" height=\"" << T * kCell
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  if (m.gold) {
    for (auto [s, t] : *m.gold) {
      if (s >= S || t >= T) continue;
      o << "<circle class=\"gold\" cx=\"" << left + s * kCell + kCell / 2 << "\" cy=\"" << top + t * kCell + kCell / 2
        << "\" r=\"4\" fill=\"none\" stroke=\"#e6550d\" stroke-width=\"2\"/>\n";
    }
  }
  o << "</g>\n";
  return left + S * kCell;
}

}  // namespace

std::string attention_svg(const AttentionMap& m) {
  int left = 20, top = 30;
  for (const auto& t : m.tgt_tokens) left = std::max(left, label_px(t) + 14);
  for (const auto& s : m.src_tokens) top = std::max(top, static_cast<int>(label_px(s) * 0.87) + 30);
  std::vector<std::pair<std::string, const std::vector<std::vector<float>>*>> panels;
  panels.emplace_back(m.heads.empty() ? "attention" : "mean of " + std::to_string(m.heads.size()) + " heads", &m.weights);
  for (size_t h = 0; h < m.heads.size(); ++h) panels.emplace_back("head " + std::to_string(h + 1), &m.heads[h]);
  const int T = static_cast<int>(m.weights.size()), S = static_cast<int>(m.src_tokens.size());
  const int panel_w = left + S * kCell + 30, panel_h = top + T * kCell + 20;
  const int legend_h = 60 + (m.gold ? 20 : 0);
  const int width = std::max(320, panel_w * static_cast<int>(panels.size())), height = panel_h + legend_h;
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << width << " " << height << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t p = 0; p < panels.size(); ++p)
    panel(o, m, *panels[p].second, static_cast<int>(p) * panel_w, 0, left, top, panels[p].first);
  // Legend: colour scale 0..1, and the gold marker.
  const int ly = panel_h + 10;
  o << "<defs><linearGradient id=\"scale\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\"><stop offset=\"0\" stop-color=\"" << colour(0)
    << "\"/><stop offset=\"1\" stop-color=\"" << colour(1) << "\"/></linearGradient></defs>\n";
  o << "<text x=\"" << left << "\" y=\"" << ly + 12 << "\">attention weight</text>\n";
  o << "<rect x=\"" << left + 110 << "\" y=\"" << ly << "\" width=\"150\" height=\"14\" fill=\"url(#scale)\" stroke=\"#888\"/>\n";
  o << "<text x=\"" << left + 110 << "\" y=\"" << ly + 28 << "\" text-anchor=\"middle\">0</text>\n";
  o << "<text x=\"" << left + 185 << "\" y=\"" << ly + 28 << "\" text-anchor=\"middle\">0.5</text>\n";
  o << "<text x=\"" << left + 260 << "\" y=\"" << ly + 28 << "\" text-anchor=\"middle\">1</text>\n";
  if (m.gold) {
    o << "<circle cx=\"" << left + 5 << "\" cy=\"" << ly + 44 << "\" r=\"4\" fill=\"none\" stroke=\"#e6550d\" stroke-width=\"2\"/>\n";
    char buf[64] = "";
    if (m.aer) std::snprintf(buf, sizeof(buf), " (AER of the argmax alignment: %.3f)", *m.aer);
    o << "<text x=\"" << left + 14 << "\" y=\"" << ly + 48 << "\">gold alignment" << buf << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string attention_gallery_html(const std::vector<std::pair<std::string, AttentionMap>>& entries, const std::string& title,
                                   const std::vector<std::string>& formats, std::optional<double> corpus_aer) {
  auto has = [&](const std::string& f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}figure{margin:1.5em 0;border-top:1px solid #ccc;"
       "padding-top:1em}figcaption{margin-bottom:.5em}img{max-width:100%;height:auto}.src{color:#333}.tgt{color:#08306b}"
       "</style></head><body>\n";
  std::vector<std::string> kinds;  // the self-attention layers present, in order of first appearance
  size_t cross = 0;
  for (const auto& e : entries) {
    if (e.second.self_attention.empty()) ++cross;
    else if (std::find(kinds.begin(), kinds.end(), e.second.self_attention) == kinds.end()) kinds.push_back(e.second.self_attention);
  }
  o << "<h1>" << xml_escape(title) << "</h1>\n<p>" << cross << " map(s) of cross-attention.";
  if (corpus_aer) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " Corpus AER: %.3f.", *corpus_aer);
    o << buf;
  }
  o << " Rows are target tokens, columns source tokens; darker = more attention; orange rings = gold alignment.</p>\n";
  if (!kinds.empty()) {
    // Self-attention maps: one figure per sentence and layer, a panel per head; the list shows one kind at a time.
    o << "<p><label>Show <select id=\"kind\" onchange=\"for(const f of document.querySelectorAll('figure'))"
         "f.hidden=this.value!=='all'&&f.dataset.kind!==this.value\"><option value=\"all\">everything</option>"
         "<option value=\"cross\">cross-attention</option>";
    for (const auto& k : kinds) o << "<option value=\"" << xml_escape(k) << "\">self-attention, " << xml_escape(k) << "</option>";
    o << "</select></label> Self-attention maps: rows are queries, columns keys, both from one sequence (the decoder's "
         "are its inputs, &lt;bos&gt; first; its causal mask leaves the upper triangle empty). One panel per head.</p>\n";
  }
  for (const auto& [stem, m] : entries) {
    o << "<figure id=\"s" << stem << "\" data-kind=\"" << (m.self_attention.empty() ? "cross" : xml_escape(m.self_attention))
      << "\"><figcaption><b>" << stem << "</b>";
    if (!m.self_attention.empty()) o << " &middot; self-attention, " << xml_escape(m.self_attention);
    if (m.aer) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " &middot; AER %.3f", *m.aer);
      o << buf;
    }
    o << "<br><span class=\"src\">" << xml_escape(m.source_text) << "</span><br><span class=\"tgt\">"
      << xml_escape(m.target_text) << "</span><br>";
    for (const char* f : {"svg", "json", "csv"})
      if (has(f)) o << "<a href=\"" << stem << "." << f << "\">" << f << "</a> ";
    o << "</figcaption>\n";
    if (has("svg")) o << "<img src=\"" << stem << ".svg\" alt=\"attention map " << stem << "\">\n";
    o << "</figure>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace attnmt
