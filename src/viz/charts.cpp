#include "viz/charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "viz/attention_maps.h"

namespace attnmt {

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string chart_num(double v) {
  char buf[32];
  if (std::fabs(v) >= 1000 || v == std::floor(v)) std::snprintf(buf, sizeof(buf), "%.0f", v);
  else if (std::fabs(v) >= 10) std::snprintf(buf, sizeof(buf), "%.1f", v);
  else std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// "Nice" tick step for a range.
double tick_step(double range, int target) {
  double raw = range / std::max(1, target);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

void chart(std::ostringstream& o, const ChartSpec& c, int x0) {
  const int ml = 60, mr = 20, mt = 30, mb = 70 + 16 * static_cast<int>((c.series.size() + 1) / 2);
  const int pw = c.width - ml - mr, ph = c.height - mt - mb;
  double xmin = 1e300, xmax = -1e300, ymin = 0, ymax = -1e300;
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]);
      ymax = std::max(ymax, s.y[i]);
    }
  if (!c.x_tick_labels.empty()) {  // categorical: half a slot of room on each side for the labels
    xmin = std::min(xmin, 0.0) - 0.4;
    xmax = std::max(xmax, static_cast<double>(c.x_tick_labels.size() - 1)) + 0.4;
  }
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax <= ymin) ymax = ymin + 1;
  double ystep = tick_step(ymax - ymin, 5);
  ymax = std::ceil(ymax / ystep - 1e-9) * ystep;  // a BLEU of 100 + rounding error stays on the 100 tick
  auto X = [&](double x) { return ml + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return mt + ph - (y - ymin) / (ymax - ymin) * ph; };
  o << "<g transform=\"translate(" << x0 << ",0)\">\n";
  o << "<text x=\"" << ml + pw / 2 << "\" y=\"18\" text-anchor=\"middle\" font-weight=\"bold\">" << xml_escape(c.title) << "</text>\n";
  for (double y = ymin; y <= ymax + 1e-9; y += ystep) {
    o << "<line x1=\"" << ml << "\" x2=\"" << ml + pw << "\" y1=\"" << Y(y) << "\" y2=\"" << Y(y) << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << ml - 6 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << chart_num(y) << "</text>\n";
  }
  if (!c.x_tick_labels.empty()) {
    for (size_t i = 0; i < c.x_tick_labels.size(); ++i)
      o << "<text x=\"" << X(static_cast<double>(i)) << "\" y=\"" << mt + ph + 16 << "\" text-anchor=\"middle\">"
        << xml_escape(c.x_tick_labels[i]) << "</text>\n";
  } else {
    double xs = tick_step(xmax - xmin, 5);
    for (double x = std::ceil(xmin / xs) * xs; x <= xmax + 1e-9; x += xs)
      o << "<text x=\"" << X(x) << "\" y=\"" << mt + ph + 16 << "\" text-anchor=\"middle\">" << chart_num(x) << "</text>\n";
  }
  o << "<rect x=\"" << ml << "\" y=\"" << mt << "\" width=\"" << pw << "\" height=\"" << ph << "\" fill=\"none\" stroke=\"#444\"/>\n";
  o << "<text x=\"" << ml + pw / 2 << "\" y=\"" << mt + ph + 34 << "\" text-anchor=\"middle\">" << xml_escape(c.x_label) << "</text>\n";
  o << "<text x=\"14\" y=\"" << mt + ph / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " << mt + ph / 2 << ")\">"
    << xml_escape(c.y_label) << "</text>\n";
  for (size_t k = 0; k < c.series.size(); ++k) {
    const auto& s = c.series[k];
    const char* col = kPalette[k % 8];
    std::ostringstream pts;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) pts << X(s.x[i]) << "," << Y(s.y[i]) << " ";
    o << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\" points=\"" << pts.str() << "\"/>\n";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i]))
        o << "<circle cx=\"" << X(s.x[i]) << "\" cy=\"" << Y(s.y[i]) << "\" r=\"3\" fill=\"" << col << "\"/>\n";
    int lx = ml + static_cast<int>(k % 2) * (pw / 2), ly = mt + ph + 52 + 16 * static_cast<int>(k / 2);
    o << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4 << "\" stroke=\"" << col
      << "\" stroke-width=\"2\"/>\n";
    o << "<text class=\"legend\" x=\"" << lx + 24 << "\" y=\"" << ly << "\">" << xml_escape(s.name) << "</text>\n";
  }
  o << "</g>\n";
}

std::string document(const std::vector<ChartSpec>& charts) {
  int w = 0, h = 0;
  for (const auto& c : charts) {
    w += c.width;
    h = std::max(h, c.height);
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\""
    << h << "\" viewBox=\"0 0 " << w << " " << h << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  int x = 0;
  for (const auto& c : charts) {
    chart(o, c, x);
    x += c.width;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::string line_chart_svg(const ChartSpec& spec) { return document({spec}); }
std::string chart_row_svg(const std::vector<ChartSpec>& charts) { return document(charts); }

}  // namespace attnmt
