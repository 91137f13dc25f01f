// Inline SVG for the training report: line charts and attention heat maps, as strings.
// No JavaScript, no fonts or files fetched: a page built from these opens offline.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::imdb::svg {

// Text made safe inside HTML/SVG elements and attribute values (& < > " ').
std::string escape(std::string_view text);

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::string color;   // any CSS colour
  bool points = false;  // a dot at each point (for short series such as epochs)
  double width = 1.5;   // stroke width
  double opacity = 1.0;
};

struct Chart {
  std::string title, x_label, y_label;
  std::string id;        // the <svg> element's id (tests look charts up by it)
  int width = 720, height = 280;
  bool y_from_zero = false;  // else the y range is the data's, padded
  std::string y_format = "{:.3g}";  // fmt format of the y tick labels
  bool integer_x = false;           // x ticks only at whole numbers (epochs)
};

// Lines over shared axes with ticks, labels and a legend. Empty series are skipped.
std::string line_chart(const Chart& chart, const std::vector<Series>& series);
// The mean of the last `window` values at each point: a noisy series (a loss per step) smoothed for its chart.
std::vector<double> moving_average(const std::vector<double>& xs, size_t window);

struct HeatMap {
  std::string title;                // drawn above the map
  std::vector<std::string> labels;  // tokens: rows (queries) and columns (keys)
  std::vector<double> values;       // labels.size()^2, row-major, each in [0, 1]
  std::string css_class = "heatmap";
  std::vector<std::pair<std::string, std::string>> data;  // data-* attributes on the <svg>
  int cell = 9;                     // pixels per cell
};

// Rows = query tokens, columns = key tokens; darker = more weight, on one fixed scale for every
// map (opacity = sqrt(weight)), so maps compare across heads and models; the title gives the max.
std::string heat_map(const HeatMap& map);

}  // namespace ember::imdb::svg
