// Small SVG line charts: training curves and BLEU by source length.
#pragma once
#include <string>
#include <vector>

namespace attnmt {

struct Series {
  std::string name;          // legend label
  std::vector<double> x, y;  // same length
};

struct ChartSpec {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<std::string> x_tick_labels;  // optional: labels at x = 0, 1, 2, ... (categorical axis)
  int width = 420, height = 300;
};

// One chart as a standalone SVG document.
std::string line_chart_svg(const ChartSpec& spec);
// Several charts side by side in one SVG document.
std::string chart_row_svg(const std::vector<ChartSpec>& charts);

}  // namespace attnmt
