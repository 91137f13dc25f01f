// Inline SVG charts and heat maps (see svg.h).
#include "examples/imdb/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ember::imdb::svg {
namespace {

// About `count` round tick values (1, 2 or 5 times a power of ten, at least min_step apart) in [low, high].
std::vector<double> ticks(double low, double high, int count, double min_step = 0) {
  double span = high - low;
  if (!(span > 0)) return {low};
  double raw = span / count, power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : raw / power < 7.5 ? 5 * power : 10 * power;
  step = std::max(step, min_step);
  std::vector<double> out;
  // NOTE: k * step, not repeated += step, so that ticks land exactly on round numbers.
  for (double k = std::ceil(low / step); k * step <= high + step * 1e-9; k += 1) out.push_back(k * step + 0.0);  // + 0.0: no "-0" label
  return out;
}

std::string tick_label(double v) {
  if (std::abs(v) >= 1e4) return fmt::format("{:.0f}", v);
  return fmt::format("{:.4g}", v);
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string line_chart(const Chart& chart, const std::vector<Series>& series) {
  const double left = 64, right = 16, top = 32, bottom = 44;
  const double plot_w = chart.width - left - right, plot_h = chart.height - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no data: empty axes
  if (chart.y_from_zero) y0 = std::min(0.0, y0);
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  double pad = 0.05 * (y1 - y0);
  if (!chart.y_from_zero || y0 < 0) y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * plot_h; };

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"chart\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      escape(chart.id), chart.width, chart.height, chart.width, chart.height, escape(chart.title));
  out += fmt::format("<text x=\"{}\" y=\"18\" class=\"chart-title\">{}</text>\n", left, escape(chart.title));
  for (double t : ticks(y0, y1, 5)) {
    out += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", left,
                       left + plot_w, py(t), py(t));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>\n", left - 6,
                       py(t) + 4, escape(fmt::format(fmt::runtime(chart.y_format), t)));
  }
  for (double t : ticks(x0, x1, 6, chart.integer_x ? 1.0 : 0.0)) {
    out += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"axis\"/>", px(t), px(t),
                       top + plot_h, top + plot_h + 4);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n", px(t),
                       top + plot_h + 16, tick_label(t));
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>\n", left, top, plot_w, plot_h);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>\n",
                     left + plot_w / 2, chart.height - 6, escape(chart.x_label));
  out += fmt::format("<text x=\"14\" y=\"{:.1f}\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1f})\">{}</text>\n",
                     top + plot_h / 2, top + plot_h / 2, escape(chart.y_label));
  double legend_x = left + plot_w;
  for (auto it = series.rbegin(); it != series.rend(); ++it) {  // legend, right-aligned at the top
    const Series& s = *it;
    if (s.label.empty()) continue;
    double w = 28 + 7.0 * double(s.label.size());
    legend_x -= w;
    out += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"22\" y2=\"22\" stroke=\"{}\" stroke-width=\"3\"/>"
                       "<text x=\"{:.1f}\" y=\"26\" class=\"tick\">{}</text>\n",
                       legend_x, legend_x + 16, escape(s.color), legend_x + 20, escape(s.label));
  }
  for (const Series& s : series) {
    if (s.x.empty()) continue;
    std::string points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
    out += fmt::format("<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-opacity=\"{}\" points=\"{}\"/>\n",
                       escape(s.color), s.width, s.opacity, points);
    if (s.points)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]))
          out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: {}</title></circle>\n",
                             px(s.x[i]), py(s.y[i]), escape(s.color), tick_label(s.x[i]),
                             escape(fmt::format(fmt::runtime(chart.y_format), s.y[i])));
  }
  return out + "</svg>\n";
}

std::string heat_map(const HeatMap& map) {
  const size_t n = map.labels.size();
  size_t longest = 0;
  for (const auto& l : map.labels) longest = std::max(longest, std::min<size_t>(l.size(), 14));
  const double label_w = 8 + 5.6 * double(longest), title_h = 18, cell = map.cell;
  const double size = cell * double(n), width = label_w + size + 4, height = title_h + label_w + size + 4;
  double peak = 0;
  for (double v : map.values) peak = std::max(peak, v);
  // One fixed scale for every map, so that maps compare: opacity sqrt(weight), white 0 to darkest 1.
  // (A uniform row over 32 keys, 1/32 each, is pale: 0.18; a head that picks one key is dark.)
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"{}\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\"",
      escape(map.css_class), width, height, width, height);
  for (const auto& [key, value] : map.data) out += fmt::format(" data-{}=\"{}\"", escape(key), escape(value));
  out += fmt::format(">\n<text x=\"0\" y=\"13\" class=\"map-title\">{} (max {:.2f})</text>\n", escape(map.title), peak);
  auto short_label = [](const std::string& l) { return l.size() > 14 ? l.substr(0, 13) + "…" : l; };
  const double x0 = label_w, y0 = title_h + label_w;
  for (size_t i = 0; i < n; ++i) {  // key labels, rotated, above the columns; query labels left of the rows
    double cx = x0 + cell * (double(i) + 0.5) + 3, cy = y0 + cell * (double(i) + 0.5) + 3;
    out += fmt::format("<text class=\"tok\" x=\"{:.1f}\" y=\"{:.1f}\" transform=\"rotate(-90 {:.1f} {:.1f})\">{}</text>",
                       cx, y0 - 3, cx, y0 - 3, escape(short_label(map.labels[i])));
    out += fmt::format("<text class=\"tok\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x0 - 3, cy,
                       escape(short_label(map.labels[i])));
  }
  out += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#fff\" stroke=\"#999\"/>\n<g fill=\"#08306b\">",
                     x0, y0, size, size);
  // Cells grouped by shade (opacity to 2 decimals): one <path> per shade keeps the page small.
  std::map<int, std::string> cells_by_shade;
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < n; ++c) {
      int shade = int(std::lround(100 * std::sqrt(std::clamp(map.values[r * n + c], 0.0, 1.0))));
      if (shade < 1) continue;  // white anyway
      cells_by_shade[shade] += fmt::format("M{:.0f} {:.0f}h{}v{}h-{}z", x0 + cell * double(c), y0 + cell * double(r),
                                           map.cell, map.cell, map.cell);
    }
  for (const auto& [shade, cells] : cells_by_shade)
    out += fmt::format("<path fill-opacity=\"{:.2f}\" d=\"{}\"/>", shade / 100.0, cells);
  return out + "</g>\n</svg>\n";
}

std::vector<double> moving_average(const std::vector<double>& xs, size_t window) {
  std::vector<double> out;
  double sum = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    sum += xs[i];
    if (i >= window) sum -= xs[i - window];
    out.push_back(sum / double(std::min(i + 1, window)));
  }
  return out;
}

}  // namespace ember::imdb::svg
