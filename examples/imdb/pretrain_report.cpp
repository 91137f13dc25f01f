// report.html of an `imdb pretrain` folder: the masked-token loss and accuracy per step (with a moving
// mean; the steps are noisy) and per epoch, drawn with svg.h's charts, and the run's settings.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/report.h"
#include "examples/imdb/svg.h"

namespace ember::imdb {

void write_pretrain_report(const std::string& folder, const std::map<std::string, std::string>& settings,
                           int64_t parameters) {
  // Every line checked, as a classifier's report reads its own (a step of 1e300, a loss that is text: errors naming
  // the file, line and field); a step logged twice (a resume) keeps its last line.
  const Metrics metrics = read_metrics(folder + "/metrics.jsonl");
  std::vector<double> epoch, epoch_loss, epoch_accuracy;
  for (const EpochRecord& e : metrics.epochs) {
    epoch.push_back(double(e.epoch));
    epoch_loss.push_back(e.train_loss);
    epoch_accuracy.push_back(100 * e.masked_accuracy);
  }
  std::vector<double> step, loss, accuracy;
  for (const StepRecord& s : metrics.steps) step.push_back(double(s.step)), loss.push_back(s.loss), accuracy.push_back(100 * s.accuracy);
  const size_t window = std::max<size_t>(1, step.size() / 50);
  std::string body = fmt::format("<h1>Ember IMDb masked-token pretraining: {}</h1>\n", svg::escape(folder));
  body += fmt::format("<p>{} parameters; {} steps logged. The loss and accuracy are over the masked tokens of each "
                      "step's batch (15% of its tokens: 80% shown as [MASK], 10% as a random word, 10% as they are); "
                      "the thick line is the mean of the last {} steps.</p>\n",
                      parameters, step.size(), window);
  body += "<div class=\"charts\">\n";
  body += svg::line_chart({"Masked-token loss per step", "step", "cross-entropy", "pretrain-loss"},
                          {{"step", step, loss, "#1f77b4", false, 1.0, 0.35},
                           {"moving mean", step, svg::moving_average(loss, window), "#1f77b4", false, 2.5, 1.0}});
  body += svg::line_chart({"Masked-token accuracy per step", "step", "accuracy (%)", "pretrain-accuracy"},
                          {{"step", step, accuracy, "#d62728", false, 1.0, 0.35},
                           {"moving mean", step, svg::moving_average(accuracy, window), "#d62728", false, 2.5, 1.0}});
  body += "</div>\n<h2>Epochs</h2>\n<table><tr><th>epoch</th><th>loss</th><th>accuracy</th></tr>\n";
  for (size_t i = 0; i < epoch.size(); ++i)
    body += fmt::format("<tr><td>{}</td><td>{:.4f}</td><td>{:.2f}%</td></tr>\n", epoch[i], epoch_loss[i], epoch_accuracy[i]);
  body += "</table>\n<h2>Settings</h2>\n<table>\n";
  for (const auto& [key, value] : settings)
    body += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td></tr>\n", svg::escape(key), svg::escape(value));
  body += "</table>\n";
  const std::string page = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\nbody {{ "
      "font-family: system-ui, sans-serif; margin: 24px; color: #222; }} .charts {{ display: flex; flex-wrap: wrap; "
      "gap: 16px; }} .chart .grid {{ stroke: #eee; }} .chart .axis {{ stroke: #666; }} .chart .frame {{ fill: none; "
      "stroke: #999; }} .chart-title {{ font-size: 14px; font-weight: 600; }} .tick {{ font-size: 11px; fill: #444; }} "
      ".label {{ font-size: 12px; }} table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border: 1px solid "
      "#ddd; padding: 3px 8px; text-align: right; }} td.name {{ text-align: left; }}\n</style>\n</head>\n<body>\n{}"
      "</body>\n</html>\n",
      svg::escape("pretraining " + folder), body);
  write_file_atomically(folder + "/report.html", page);
}

}  // namespace ember::imdb
