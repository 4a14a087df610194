#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "viz/attention_maps.h"
#include "viz/charts.h"

using namespace attnmt;

namespace {

// Minimal XML well-formedness check for the documents this project writes: balanced tags, quoted
// attributes, no raw '<' or '&' in text, only the five predefined entities (or numeric ones).
::testing::AssertionResult well_formed_xml(const std::string& x) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (x.rfind("<?xml", 0) == 0) i = x.find("?>") + 2;
  while (i < x.size()) {
    if (x[i] == '<') {
      size_t end = x.find('>', i);
      if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
      std::string tag = x.substr(i + 1, end - i - 1);
      int quotes = static_cast<int>(std::count(tag.begin(), tag.end(), '"'));
      if (quotes % 2) return ::testing::AssertionFailure() << "odd quotes in <" << tag << ">";
      if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside tag " << tag;
      if (tag[0] == '/') {
        std::string name = tag.substr(1);
        if (stack.empty() || stack.back() != name)
          return ::testing::AssertionFailure() << "mismatched </" << name << "> (open: " << (stack.empty() ? "" : stack.back()) << ")";
        stack.pop_back();
      } else if (tag.back() != '/') {
        stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
      }
      i = end + 1;
    } else if (x[i] == '&') {
      size_t semi = x.find(';', i);
      std::string ent = semi == std::string::npos ? "" : x.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;" && ent.rfind("&#", 0) != 0)
        return ::testing::AssertionFailure() << "bad entity at " << i << ": " << x.substr(i, 10);
      i = semi + 1;
    } else {
      ++i;
    }
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "unclosed <" << stack.back() << ">";
  return ::testing::AssertionSuccess();
}

AttentionMap sample_map() {
  AttentionMap m;
  m.src_tokens = {"the", "<b>", "R&D", "\"quoted\"", "café"};
  m.tgt_tokens = {"le", "R&D", "élève's", "<eos>"};
  m.weights = {{0.7f, 0.1f, 0.1f, 0.05f, 0.05f}, {0.0f, 0.0f, 1.0f, 0.0f, 0.0f}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f},
               {0.1f, 0.1f, 0.1f, 0.1f, 0.6f}};
  m.gold = Alignment{{0, 0}, {2, 1}, {4, 2}};
  m.aer = 0.25;
  m.source_text = "the <b> R&D \"quoted\" café";
  m.target_text = "le R&D élève's";
  return m;
}

}  // namespace

TEST(Viz, EscapingHelpers) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("café"), "café");
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(Viz, JsonHasTokensAndRowsSumToOne) {
  AttentionMap m = sample_map();
  auto j = nlohmann::json::parse(attention_json(m));
  ASSERT_EQ(j["src_tokens"].size(), 5u);
  ASSERT_EQ(j["tgt_tokens"].size(), 4u);
  ASSERT_EQ(j["weights"].size(), 4u);
  for (const auto& row : j["weights"]) {
    ASSERT_EQ(row.size(), 5u);
    double s = 0;
    for (const auto& v : row) s += v.get<double>();
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  EXPECT_EQ(j["src_tokens"][2], "R&D");
  EXPECT_EQ(j["gold"].size(), 3u);
}

TEST(Viz, CsvShapeMatchesTokens) {
  std::string csv = attention_csv(sample_map());
  std::vector<std::string> lines;
  std::istringstream in(csv);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u);  // header + 4 target rows
  EXPECT_EQ(lines[0], ",the,<b>,R&D,\"\"\"quoted\"\"\",café");
  EXPECT_EQ(lines[2].rfind("R&D,", 0), 0u);
  for (size_t r = 1; r < lines.size(); ++r) EXPECT_EQ(std::count(lines[r].begin(), lines[r].end(), ','), 5) << lines[r];
}

TEST(Viz, SvgIsWellFormedWithEveryLabelEscaped) {
  AttentionMap m = sample_map();
  std::string svg = attention_svg(m);
  EXPECT_TRUE(well_formed_xml(svg));
  for (const auto& t : m.src_tokens) EXPECT_NE(svg.find(">" + xml_escape(t) + "</text>"), std::string::npos) << t;
  for (const auto& t : m.tgt_tokens) EXPECT_NE(svg.find(">" + xml_escape(t) + "</text>"), std::string::npos) << t;
  EXPECT_EQ(svg.find("<b>"), std::string::npos);  // raw markup from a token never reaches the document
  size_t rings = 0;
  for (size_t p = svg.find("class=\"gold\""); p != std::string::npos; p = svg.find("class=\"gold\"", p + 1)) ++rings;
  EXPECT_EQ(rings, 3u);
  EXPECT_NE(svg.find("attention weight"), std::string::npos);  // the legend
}

TEST(Viz, MultiHeadSvgHasOnePanelPerHeadPlusMean) {
  AttentionMap m = sample_map();
  m.heads = {m.weights, m.weights, m.weights};
  std::string svg = attention_svg(m);
  EXPECT_TRUE(well_formed_xml(svg));
  EXPECT_NE(svg.find("mean of 3 heads"), std::string::npos);
  EXPECT_NE(svg.find("head 3"), std::string::npos);
  EXPECT_EQ(svg.find("head 4"), std::string::npos);
}

TEST(Viz, GalleryLinksEveryMapAndEscapesText) {
  std::vector<std::pair<std::string, AttentionMap>> e = {{"0001", sample_map()}, {"0002", sample_map()}};
  std::string html = attention_gallery_html(e, "maps <test>", {"svg", "json"}, 0.5);
  EXPECT_NE(html.find("<img src=\"0001.svg\""), std::string::npos);
  EXPECT_NE(html.find("href=\"0002.json\""), std::string::npos);
  EXPECT_EQ(html.find("href=\"0001.csv\""), std::string::npos);  // csv not written, not linked
  EXPECT_NE(html.find("maps &lt;test&gt;"), std::string::npos);
  EXPECT_NE(html.find("R&amp;D &quot;quoted&quot;"), std::string::npos);
  EXPECT_NE(html.find("Corpus AER: 0.500"), std::string::npos);
}

TEST(Viz, ChartsAreWellFormed) {
  ChartSpec c{"BLEU by length", "source length", "BLEU", {{"none", {0, 1, 2}, {30, 20, 5}}, {"a<b", {0, 1, 2}, {40, 41, 39}}},
              {"1-10", "11-20", "21-30"}};
  std::string svg = line_chart_svg(c);
  EXPECT_TRUE(well_formed_xml(svg));
  EXPECT_NE(svg.find(">11-20</text>"), std::string::npos);
  EXPECT_NE(svg.find(">a&lt;b</text>"), std::string::npos);
  size_t lines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  EXPECT_TRUE(well_formed_xml(chart_row_svg({c, c})));
}
