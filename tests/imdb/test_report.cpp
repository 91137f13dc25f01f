// The training report's pieces: SVG escaping and drawing, reading metrics.jsonl, choosing reviews,
// attention weights of a real model, and the page holding one heat map per (review, layer, head).
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "examples/imdb/report.h"
#include "examples/imdb/svg.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::imdb;
using namespace ember::testing;
namespace fs = std::filesystem;

namespace {
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
std::string temp_file(const std::string& name, const std::string& contents) {
  fs::path dir = fs::temp_directory_path() / ("ember_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << contents;
  return (dir / name).string();
}
}  // namespace

TEST_CASE("report svg: text is escaped, heat maps label every token and shade by weight") {
  CHECK(svg::escape("<b>\"it's\" & more</b>") == "&lt;b&gt;&quot;it&#39;s&quot; &amp; more&lt;/b&gt;");
  svg::HeatMap map;
  map.title = "layer 1 head 2";
  map.labels = {"<i>", "don't", "x"};
  map.values = {1, 0, 0, 0.25, 0.75, 0, 0.0001, 0, 0.9999};
  map.data = {{"layer", "0"}, {"head", "1"}};
  std::string s = svg::heat_map(map);
  CHECK(s.find("data-layer=\"0\" data-head=\"1\"") != std::string::npos);
  CHECK(s.find("<i>") == std::string::npos);  // labels are escaped
  CHECK(count(s, ">&lt;i&gt;</text>") == 2);  // each token labels a row and a column
  CHECK(count(s, ">don&#39;t</text>") == 2);
  CHECK(s.find("(max 1.00)") != std::string::npos);
  // Cells: opacity sqrt(weight), one path per shade; weights below 0.5e-4 are left white.
  CHECK(count(s, "h9v9h-9z") == 5);
  CHECK(count(s, "fill-opacity=") == 4);  // 1 and 0.9999 share the shade 1.00
  CHECK(s.find("fill-opacity=\"0.50\"") != std::string::npos);  // sqrt(0.25)
  CHECK(s.find("fill-opacity=\"0.87\"") != std::string::npos);  // sqrt(0.75)

  std::string chart = svg::line_chart({"Loss", "step", "loss", "loss-chart"}, {{"a", {1, 2, 3}, {3, 2, 1}, "#123456"}});
  CHECK(chart.find("id=\"loss-chart\"") != std::string::npos);
  CHECK(chart.find("points=\"") != std::string::npos);
  CHECK(count(chart, "<polyline") == 1);
}

TEST_CASE("report metrics: steps and epochs are read, a resumed step keeps its last line, bad lines are errors") {
  std::string path = temp_file("metrics.jsonl",
                               "{\"kind\": \"step\", \"step\": 1, \"epoch\": 1, \"loss\": 0.7, \"lr\": 0}\n"
                               "{\"kind\": \"step\", \"step\": 2, \"epoch\": 1, \"loss\": 0.6, \"lr\": 1e-4}\n"
                               "{\"kind\": \"step\", \"step\": 2, \"epoch\": 1, \"loss\": 0.5, \"lr\": 1e-4}\n"
                               "{\"kind\": \"epoch\", \"epoch\": 1, \"step\": 2, \"train_loss\": 0.55, \"test_accuracy\": 0.8, "
                               "\"train_seconds\": 3, \"real_tokens_per_s\": 1000}\n");
  Metrics m = read_metrics(path);
  REQUIRE(m.steps.size() == 2);
  CHECK(m.steps[1].loss == doctest::Approx(0.5));
  REQUIRE(m.epochs.size() == 1);
  CHECK(m.epochs[0].test_accuracy == doctest::Approx(0.8));
  CHECK(m.epochs[0].real_tokens_per_s == doctest::Approx(1000));
  CHECK(std::isnan(m.epochs[0].validation_accuracy));  // a run without --validation
  std::string validated = temp_file("validated.jsonl",
                                    "{\"kind\": \"epoch\", \"epoch\": 1, \"step\": 2, \"train_loss\": 0.5, "
                                    "\"test_accuracy\": 0.8, \"validation_accuracy\": 0.83, \"validation_reviews\": 10}\n");
  CHECK(read_metrics(validated).epochs.at(0).validation_accuracy == doctest::Approx(0.83));
  std::string bad = temp_file("bad.jsonl", "{\"kind\": \"step\", \"step\": 1}\nnot json\n");
  check_error([&] { read_metrics(bad); }, "bad.jsonl:2");
  check_error([] { read_metrics("/nonexistent/metrics.jsonl"); }, "/nonexistent/metrics.jsonl");
}

TEST_CASE("report metrics: a field out of range or of the wrong type is an error naming the file, line and field") {
  // A step of 1e300 or 2^63 was converted to garbage and drawn without a word.
  const std::string good = "{\"kind\": \"step\", \"step\": 1, \"loss\": 0.7, \"lr\": 0}\n";
  struct Case {
    const char* line;
    const char* message;
  };
  for (Case c : {Case{"{\"kind\": \"step\", \"step\": 1e300, \"loss\": 0.5}",
                      "m.jsonl:2: field 'step' = 1e+300 is not an integer in [0, 4611686018427387904]"},
                 Case{"{\"kind\": \"step\", \"step\": 9223372036854775808}", "field 'step' = 9223372036854775808 is not"},
                 Case{"{\"kind\": \"step\", \"step\": 18446744073709551615}", "field 'step' = 18446744073709551615"},
                 Case{"{\"kind\": \"step\", \"step\": -1}", "field 'step' = -1 is not an integer"},
                 Case{"{\"kind\": \"step\", \"step\": 2.5}", "field 'step' = 2.5 is not an integer"},
                 Case{"{\"kind\": \"step\", \"step\": \"3\"}", "field 'step' = \"3\" is not an integer"},
                 Case{"{\"kind\": \"step\"}", "field 'step' = missing is not an integer"},
                 Case{"{\"kind\": \"step\", \"step\": 2, \"loss\": \"low\"}", "field 'loss' = \"low\" is not a number"},
                 Case{"{\"kind\": \"epoch\", \"epoch\": 0, \"step\": 2}", "field 'epoch' = 0 is not an integer in [1, 1000000]"},
                 Case{"{\"kind\": \"epoch\", \"epoch\": 1, \"step\": 1e300}", "m.jsonl:2: field 'step' = 1e+300"},
                 Case{"{\"kind\": \"epoch\", \"epoch\": 1, \"step\": 2, \"test_accuracy\": [1]}",
                      "field 'test_accuracy' = [1] is not a number"}}) {
    INFO(c.line);
    const std::string path = temp_file("m.jsonl", good + c.line + "\n");
    check_error([&] { read_metrics(path); }, c.message);
  }
  // A NaN is written as null: read as NaN, not an error; the largest step is read.
  const std::string path = temp_file("m.jsonl", "{\"kind\": \"step\", \"step\": 4611686018427387904, \"loss\": null}\n");
  Metrics m = read_metrics(path);
  REQUIRE(m.steps.size() == 1);
  CHECK(m.steps[0].step == (int64_t(1) << 62));
  CHECK(std::isnan(m.steps[0].loss));
}

TEST_CASE("report reviews: short ones, half of each label, the shortest when too few are short") {
  std::vector<std::vector<int32_t>> reviews = {std::vector<int32_t>(50, 2), {2, 3}, {4, 5, 6}, std::vector<int32_t>(45, 2),
                                               {7}, std::vector<int32_t>(60, 2)};
  std::vector<int> labels = {0, 0, 1, 1, 1, 0};
  CHECK(pick_reviews(reviews, labels, 2, 10) == std::vector<size_t>{1, 2});
  CHECK(pick_reviews(reviews, labels, 4, 10) == std::vector<size_t>{1, 2, 4, 0});  // then the shortest negative
}

TEST_CASE("report attention: every head's weights, rows summing to 1, and a page with one map per head") {
  Generator gen(0);
  nn::ClassifierConfig config;
  config.vocab_size = 12;
  config.dim = 8;
  config.heads = 2;
  config.layers = 2;
  config.ffn_dim = 16;
  config.max_len = 16;
  nn::TransformerClassifier model(config, gen);
  Vocabulary vocabulary = Vocabulary::build_from_texts({"a b c d e f g h i j"}, 10);
  std::vector<int32_t> review = {2, 3, 4, 5, 6, 7};
  AttentionExample ex = attention_example(model, vocabulary, review, 1, 4);
  CHECK(model.is_training());  // put back as it was
  CHECK(ex.tokens == std::vector<std::string>{"a", "b", "c", "d", "e", "f"});
  CHECK(ex.shown == 4);
  REQUIRE(ex.maps.size() == 2);
  REQUIRE(ex.maps[0].size() == 2);
  REQUIRE(ex.maps[0][0].size() == 16);  // cut to 4 x 4
  AttentionExample full = attention_example(model, vocabulary, review, 1, 40);
  for (const auto& layer : full.maps)
    for (const auto& head : layer)
      for (size_t row = 0; row < 6; ++row) {
        double total = 0;
        for (size_t k = 0; k < 6; ++k) total += head[row * 6 + k];
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
      }
  CHECK(ex.p_positive == doctest::Approx(full.p_positive));
  CHECK(ex.p_positive > 0.0);
  CHECK(ex.p_positive < 1.0);

  RunReport report;
  report.title = "test <run>";
  report.settings = {{"heads", "2"}, {"layers", "2"}};
  report.metrics.steps = {{1, 0.7, 0}, {2, 0.6, 1e-4}};
  report.metrics.epochs = {{1, 2, 0.65, 0.75, 1.0, 100}};
  report.examples = {ex, full};
  std::string page = render_run_report(report);
  CHECK(page.find("test &lt;run&gt;") != std::string::npos);
  CHECK(count(page, "class=\"heatmap\"") == 2 * 2 * 2);  // reviews x layers x heads
  CHECK(page.find("data-review=\"1\" data-layer=\"1\" data-head=\"1\"") != std::string::npos);
  CHECK(page.find("Maps show the first 4 of its 6 tokens") != std::string::npos);
  CHECK(page.find("75.00%") != std::string::npos);
  CHECK(page.find("http") == page.find("http://www.w3.org/2000/svg"));  // nothing fetched: only the SVG namespace
  CHECK(page.find("validation") == std::string::npos);  // a run without --validation shows none
  // With --validation: its column, its curve beside the test one, and the epoch it chooses, by validation
  // accuracy (epoch 1 here), not by test accuracy (epoch 2).
  report.metrics.epochs = {{1, 2, 0.65, 0.75, 1.0, 100, 0.81}, {2, 4, 0.5, 0.78, 1.0, 100, 0.80}};
  std::string chosen = render_run_report(report);
  CHECK(chosen.find("<th>validation accuracy</th>") != std::string::npos);
  CHECK(chosen.find("<td>81.00%</td>") != std::string::npos);
  CHECK(chosen.find("Chosen by validation accuracy (held-out training reviews, not the test set): epoch 1, "
                    "validation 81.00%, test 75.00%") != std::string::npos);
  CHECK(chosen.find("class=\"tick\">validation</text>") != std::string::npos);  // the curve's legend
}

TEST_CASE("report compare: one row per model; with --validation, the epoch it chooses and its test accuracy") {
  CompareColumn single, multi;
  single.heads = 1;
  single.folder = "runs/h1";
  single.metrics.epochs = {{1, 2, 0.6, 0.70, 1.0, 100}, {2, 4, 0.5, 0.72, 1.0, 100}};
  multi.heads = 4;
  multi.folder = "runs/h4";
  multi.metrics.epochs = {{1, 2, 0.6, 0.74, 1.0, 100, 0.79}, {2, 4, 0.5, 0.76, 1.0, 100, 0.78}};
  std::string plain = render_compare_report("plain", {single});
  CHECK(plain.find("<th>best epoch (by test accuracy)</th>") != std::string::npos);
  CHECK(plain.find("chosen by validation") == std::string::npos);
  CHECK(plain.find("<td>72.00%</td><td>72.00%</td>") != std::string::npos);  // last epoch, best epoch
  std::string page = render_compare_report("both", {single, multi});
  CHECK(page.find("<th>epoch chosen by validation: its test accuracy</th>") != std::string::npos);
  CHECK(page.find("<td>76.00%</td><td>76.00%</td><td>74.00% (epoch 1)</td>") != std::string::npos);
  CHECK(page.find("<td>72.00%</td><td>72.00%</td><td>–</td>") != std::string::npos);  // h = 1 had no validation set
}
