// The report pages (see report.h): HTML around the inline SVG charts and heat maps of svg.h.
#include "examples/imdb/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "examples/imdb/svg.h"

namespace ember::imdb {
namespace {

using svg::escape;

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

// The page's frame: styles, and a small script that counts what was drawn into <body data-*>
// (the browser test reads it back, which also proves the page's script ran without errors).
std::string page(const std::string& title, const std::string& body) {
  return fmt::format(R"(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{0}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1800px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }}
h3 {{ font-size: 15px; }} h4 {{ font-size: 13px; margin: 8px 0 4px; }}
table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; }}
th {{ background: #f4f4f4; }} td.name {{ text-align: left; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.chart .grid {{ stroke: #eee; }} .chart .axis {{ stroke: #666; }} .chart .frame {{ fill: none; stroke: #999; }}
.chart-title {{ font-size: 14px; font-weight: 600; }} .tick {{ font-size: 11px; fill: #444; }} .label {{ font-size: 12px; }}
.maps {{ display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }}
.map-title {{ font-size: 11px; font-weight: 600; }} .tok {{ font-size: 8px; fill: #333; font-family: monospace; }}
.review {{ font-family: monospace; font-size: 12px; background: #f8f8f8; padding: 6px; max-width: 1200px; }}
.note {{ color: #555; font-size: 13px; max-width: 1000px; }}
.model-row {{ border-left: 3px solid #ccc; padding-left: 8px; margin: 6px 0; }}
</style>
</head>
<body>
{1}
<script>
document.body.dataset.charts = document.querySelectorAll("svg.chart").length;
document.body.dataset.heatmaps = document.querySelectorAll("svg.heatmap").length;
</script>
</body>
</html>
)",
                     escape(title), body);
}

std::string percent(double x) { return std::isfinite(x) ? fmt::format("{:.2f}%", 100 * x) : "–"; }

struct Curves {
  std::vector<double> step, loss, epoch, accuracy, validation, tokens_per_s;
};
// --validation: the epoch it chooses (the best validation accuracy, the first of equals); null without.
const EpochRecord* chosen_by_validation(const Metrics& m) {
  const EpochRecord* chosen = nullptr;
  for (const auto& e : m.epochs)
    if (std::isfinite(e.validation_accuracy) && (chosen == nullptr || e.validation_accuracy > chosen->validation_accuracy))
      chosen = &e;
  return chosen;
}

Curves curves_of(const Metrics& m) {
  Curves c;
  for (const auto& s : m.steps) c.step.push_back(double(s.step)), c.loss.push_back(s.loss);
  for (const auto& e : m.epochs) {
    c.epoch.push_back(double(e.epoch));
    c.accuracy.push_back(100 * e.test_accuracy);
    c.validation.push_back(100 * e.validation_accuracy);
    c.tokens_per_s.push_back(e.real_tokens_per_s);
  }
  return c;
}

std::string review_heading(const AttentionExample& ex, size_t index) {
  std::string text;
  for (const auto& t : ex.tokens) text += (text.empty() ? "" : " ") + t;
  std::string cut = ex.shown < int64_t(ex.tokens.size())
                        ? fmt::format(" Maps show the first {} of its {} tokens.", ex.shown, ex.tokens.size())
                        : "";
  return fmt::format("<h3 id=\"review-{}\">Review {}: {} ({} tokens), predicted {} (p positive = {:.3f}).{}</h3>\n<div class=\"review\">{}</div>\n",
                     index + 1, index + 1, ex.label ? "positive" : "negative", ex.tokens.size(),
                     ex.p_positive >= 0.5 ? "positive" : "negative", ex.p_positive, escape(cut), escape(text));
}

// One layer's heads side by side.
std::string head_maps(const AttentionExample& ex, size_t review, size_t layer, int64_t model_heads) {
  std::vector<std::string> labels(ex.tokens.begin(), ex.tokens.begin() + ex.shown);
  std::string out = "<div class=\"maps\">\n";
  for (size_t h = 0; h < ex.maps[layer].size(); ++h) {
    svg::HeatMap map;
    map.title = fmt::format("layer {} head {}", layer + 1, h + 1);
    map.labels = labels;
    map.values = ex.maps[layer][h];
    map.data = {{"review", std::to_string(review)}, {"layer", std::to_string(layer)}, {"head", std::to_string(h)},
                {"model-heads", std::to_string(model_heads)}};
    out += svg::heat_map(map);
  }
  return out + "</div>\n";
}

const char* kMapNote =
    "Each map is one head's attention weights: row = query token, column = key token, darker = more weight "
    "(each row sums to 1). One fixed scale for every map: white = 0, darkest = 1, shading = square root of the "
    "weight, so a head that spreads its attention evenly over n keys is pale (1/n each) and one that picks a few "
    "keys is dark. The title gives the map's largest weight.";

}  // namespace

std::string render_run_report(const RunReport& r) {
  Curves c = curves_of(r.metrics);
  auto setting = [&](const char* key) {
    auto it = r.settings.find(key);
    return it == r.settings.end() ? std::string("?") : it->second;
  };
  double best = NAN, seconds = 0;
  for (const auto& e : r.metrics.epochs) {
    if (std::isfinite(e.test_accuracy)) best = std::isfinite(best) ? std::max(best, e.test_accuracy) : e.test_accuracy;
    seconds += e.train_seconds;
  }
  // --test end: the test reviews were read once, after the last epoch, and no epoch has a test accuracy.
  const bool tested_once = !std::isfinite(best) && std::isfinite(r.metrics.final_test_accuracy);
  std::string body = fmt::format("<h1>Ember IMDb training report: {}</h1>\n", escape(r.title));
  body += fmt::format(
      "<p>{} heads, {} layers, dim {}; {} parameters. {} steps, {} of {} epochs; {}; {:.0f} s of training.</p>\n",
      escape(setting("heads")), escape(setting("layers")), escape(setting("dim")), r.parameters, c.step.size(),
      r.metrics.epochs.size(), escape(setting("epochs")),
      tested_once ? fmt::format("test accuracy (the test reviews read once, after the last epoch) {}",
                                percent(r.metrics.final_test_accuracy))
                  : fmt::format("test accuracy after the last epoch {}, best {}",
                                r.metrics.epochs.empty() ? "–" : percent(r.metrics.epochs.back().test_accuracy),
                                percent(best)),
      seconds);
  const EpochRecord* chosen = chosen_by_validation(r.metrics);
  if (chosen != nullptr)
    body += fmt::format("<p>Chosen by validation accuracy (held-out training reviews, not the test set): epoch {}, "
                        "validation {}, test {}.</p>\n", chosen->epoch, percent(chosen->validation_accuracy),
                        percent(chosen->test_accuracy));

  body += "<h2>Training</h2>\n<div class=\"charts\">\n";
  body += svg::line_chart({"Training loss per step", "step", "cross-entropy", "loss-chart", 760, 300, false, "{:.2f}"},
                          {{"per step", c.step, c.loss, "#9ecae1", false, 1.0, 0.8},
                           {"mean of last 50", c.step, svg::moving_average(c.loss, 50), "#08519c", false, 2.0, 1.0}});
  if (chosen != nullptr && tested_once)
    body += svg::line_chart({"Validation accuracy per epoch", "epoch", "accuracy (%)", "accuracy-chart", 420, 300, false,
                             "{:.1f}", true},
                            {{"", c.epoch, c.validation, "#ff7f0e", true, 2.0, 1.0}});
  else if (chosen == nullptr)
    body += svg::line_chart({"Test accuracy per epoch", "epoch", "accuracy (%)", "accuracy-chart", 420, 300, false, "{:.1f}", true},
                            {{"", c.epoch, c.accuracy, "#d62728", true, 2.0, 1.0}});
  else
    body += svg::line_chart({"Accuracy per epoch", "epoch", "accuracy (%)", "accuracy-chart", 420, 300,
                             false, "{:.1f}", true},
                            {{"test", c.epoch, c.accuracy, "#d62728", true, 2.0, 1.0},
                             {"validation", c.epoch, c.validation, "#ff7f0e", true, 2.0, 1.0}});
  body += svg::line_chart({"Throughput per epoch", "epoch", "real tokens / s", "throughput-chart", 420, 300, true, "{:.0f}", true},
                          {{"", c.epoch, c.tokens_per_s, "#2ca02c", true, 2.0, 1.0}});
  body += fmt::format("</div>\n<table>\n<tr><th>epoch</th><th>step</th><th>train loss</th><th>test accuracy</th>{}"
                      "<th>train time</th><th>real tokens/s</th></tr>\n",
                      chosen != nullptr ? "<th>validation accuracy</th>" : "");
  for (const auto& e : r.metrics.epochs)
    body += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.4f}</td><td>{}</td>{}<td>{:.1f} s</td><td>{:.0f}</td></tr>\n",
                        e.epoch, e.step, e.train_loss, percent(e.test_accuracy),
                        chosen != nullptr ? fmt::format("<td>{}</td>", percent(e.validation_accuracy)) : std::string(),
                        e.train_seconds, e.real_tokens_per_s);
  body += "</table>\n<h2>Settings</h2>\n<table>\n";
  for (const auto& [key, value] : r.settings)
    body += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td></tr>\n", escape(key), escape(value));
  body += "</table>\n";

  body += fmt::format("<h2>Attention maps</h2>\n<p class=\"note\">{} Reviews: short test reviews, half negative, half positive.</p>\n", kMapNote);
  for (size_t i = 0; i < r.examples.size(); ++i) {
    const AttentionExample& ex = r.examples[i];
    body += review_heading(ex, i);
    for (size_t layer = 0; layer < ex.maps.size(); ++layer)
      body += fmt::format("<h4>Layer {}</h4>\n", layer + 1) + head_maps(ex, i, layer, int64_t(ex.maps[layer].size()));
  }
  return page("Ember report: " + r.title, body);
}

std::string render_compare_report(const std::string& title, const std::vector<CompareColumn>& models) {
  std::string body = fmt::format("<h1>Ember IMDb: single-head versus multi-head attention ({})</h1>\n", escape(title));
  bool validated = false;  // any model run with --validation: a column for the epoch it chooses
  for (const CompareColumn& col : models) validated = validated || chosen_by_validation(col.metrics) != nullptr;
  body += fmt::format("<table>\n<tr><th>heads</th><th>run</th><th>test accuracy, last epoch</th><th>best epoch (by test "
                      "accuracy)</th>{}<th>train time per epoch</th><th>real tokens/s</th></tr>\n",
                      validated ? "<th>epoch chosen by validation: its test accuracy</th>" : "");
  std::vector<svg::Series> loss, accuracy;
  for (size_t m = 0; m < models.size(); ++m) {
    const CompareColumn& col = models[m];
    Curves c = curves_of(col.metrics);
    double best = 0, seconds = 0, tokens = 0;
    for (const auto& e : col.metrics.epochs)
      best = std::max(best, e.test_accuracy), seconds += e.train_seconds, tokens += e.real_tokens_per_s;
    double n = double(std::max<size_t>(1, col.metrics.epochs.size()));
    const EpochRecord* chosen = chosen_by_validation(col.metrics);
    std::string chosen_cell = !validated ? std::string()
                              : chosen == nullptr ? std::string("<td>–</td>")
                                                  : fmt::format("<td>{} (epoch {})</td>", percent(chosen->test_accuracy),
                                                                chosen->epoch);
    body += fmt::format("<tr><td>{}</td><td class=\"name\">{}</td><td>{}</td><td>{}</td>{}<td>{:.0f} s</td><td>{:.0f}</td></tr>\n",
                        col.heads, escape(col.folder),
                        col.metrics.epochs.empty() ? "–" : percent(col.metrics.epochs.back().test_accuracy),
                        percent(best), chosen_cell, seconds / n, tokens / n);
    std::string color = kColors[m % 6], label = fmt::format("h = {}", col.heads);
    loss.push_back({label, c.step, svg::moving_average(c.loss, 50), color, false, 1.5, 0.9});
    accuracy.push_back({label, c.epoch, c.accuracy, color, true, 2.0, 1.0});
  }
  body += "</table>\n<div class=\"charts\">\n";
  body += svg::line_chart({"Training loss per step (mean of last 50)", "step", "cross-entropy", "loss-chart", 760, 300, false, "{:.2f}"}, loss);
  body += svg::line_chart({"Test accuracy per epoch", "epoch", "accuracy (%)", "accuracy-chart", 520, 300, false, "{:.1f}", true}, accuracy);
  body += "</div>\n";

  body += fmt::format("<h2>Attention maps, model by model</h2>\n<p class=\"note\">{} The same reviews go through every model; "
                      "per layer, one row per model with its heads side by side.</p>\n", kMapNote);
  size_t reviews = models.front().examples.size();
  for (size_t i = 0; i < reviews; ++i) {
    body += review_heading(models.front().examples[i], i);
    for (size_t layer = 0; layer < models.front().examples[i].maps.size(); ++layer) {
      body += fmt::format("<h4>Layer {}</h4>\n", layer + 1);
      for (const CompareColumn& col : models) {
        if (i >= col.examples.size() || layer >= col.examples[i].maps.size()) continue;
        const AttentionExample& ex = col.examples[i];
        body += fmt::format("<div class=\"model-row\"><b>h = {}</b> (p positive = {:.3f})\n", col.heads, ex.p_positive);
        body += head_maps(ex, i, layer, col.heads) + "</div>\n";
      }
    }
  }
  return page("Ember compare: " + title, body);
}

}  // namespace ember::imdb
