// The single- versus multi-head comparison table.
#include "examples/imdb/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "examples/imdb/report.h"
#include "examples/imdb/run_folder.h"

namespace ember::imdb {
namespace {

struct Stats {
  double mean = 0, std = 0;
};
Stats stats(const std::vector<double>& xs) {
  Stats s;
  if (xs.empty()) return s;
  for (double x : xs) s.mean += x;
  s.mean /= double(xs.size());
  if (xs.size() > 1) {
    for (double x : xs) s.std += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(s.std / double(xs.size() - 1));  // sample standard deviation
  }
  return s;
}

// A finished run's summary, as saved in its folder's result.json: from its metrics.jsonl, so that
// a run resumed part-way counts every epoch, not only those of the last process.
nlohmann::json summarize(const RunResult& r, const std::string& folder) {
  Metrics metrics = read_metrics(folder + "/metrics.jsonl");
  EMBER_CHECK(!metrics.epochs.empty(), "compare: {}/metrics.jsonl has no epoch lines", folder);
  nlohmann::json j;
  j["parameters"] = r.parameters;
  j["test_accuracy"] = nlohmann::json::array();
  double seconds = 0, tokens = 0;
  for (const auto& e : metrics.epochs) {
    j["test_accuracy"].push_back(e.test_accuracy);
    seconds += e.train_seconds;
    tokens += e.real_tokens_per_s;
  }
  j["seconds_per_epoch"] = seconds / double(metrics.epochs.size());
  j["real_tokens_per_s"] = tokens / double(metrics.epochs.size());
  return j;
}

// One field of a result.json, of the type wanted; errors name the file.
template <typename T>
T result_field(const nlohmann::json& result, const char* key, const std::string& path) {
  try {
    return result.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("compare: {}: \"{}\" is missing or of the wrong type; delete the file to rerun that run", path, key);
  }
}

}  // namespace

namespace {

// The Markdown table over every finished run (result.json) in the compare folder.
std::string table_of_finished_runs(const CompareConfig& config) {
  std::string table =
      "| heads | head size | parameters | seeds done | test accuracy, best epoch | test accuracy, last epoch | "
      "train time per epoch | real tokens/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (int64_t heads : config.heads) {
    std::vector<double> best, last, seconds, tokens;
    int64_t parameters = 0;
    for (int64_t seed = 0; seed < config.seeds; ++seed) {
      std::string path = fmt::format("{}/heads{}-seed{}/result.json", config.out, heads, seed);
      if (!std::filesystem::exists(path)) continue;
      nlohmann::json result = nlohmann::json::parse(read_whole_file(path, "compare result"), nullptr, false);
      EMBER_CHECK(!result.is_discarded() && result.is_object(),
                  "compare: {} is not a JSON object (damaged?); delete it to rerun that run", path);
      std::vector<double> accuracy = result_field<std::vector<double>>(result, "test_accuracy", path);
      EMBER_CHECK(!accuracy.empty(), "compare: {} has no epochs; delete it to rerun that run", path);
      best.push_back(*std::max_element(accuracy.begin(), accuracy.end()));
      last.push_back(accuracy.back());
      seconds.push_back(result_field<double>(result, "seconds_per_epoch", path));
      tokens.push_back(result_field<double>(result, "real_tokens_per_s", path));
      parameters = result_field<int64_t>(result, "parameters", path);
    }
    if (best.empty()) continue;
    Stats b = stats(best), l = stats(last), s = stats(seconds), t = stats(tokens);
    table += fmt::format("| {} | {} | {} | {} | {:.2f} ± {:.2f}% | {:.2f} ± {:.2f}% | {:.0f} s | {:.0f} |\n", heads,
                         config.base.model.dim / heads, parameters, best.size(), 100 * b.mean, 100 * b.std,
                         100 * l.mean, 100 * l.std, s.mean, t.mean);
  }
  return table + fmt::format("\nMean ± sample std over the seeds done (of 0..{}); accuracy on every test review.\n",
                             config.seeds - 1);
}

}  // namespace

std::string compare(const CompareConfig& config) {
  namespace fs = std::filesystem;
  train::check_output_folder(config.out);
  // Its runs beside nothing else (a slip such as --out of a pretraining): --overwrite replaces what is there (a
  // comparison's finished runs in their folders are kept, and skipped).
  check_run_folder_kind(config.out, RunKind::comparison, "compare", config.base.overwrite, config.base.resume);
  if (config.base.overwrite) remove_run_files(config.out);
  std::unique_ptr<Data> data;  // loaded once, only if some run still has to train
  // Seed-major order, so that a comparison stopped part-way has every head count at seed 0 first.
  for (int64_t seed = 0; seed < config.seeds; ++seed) {
    for (int64_t heads : config.heads) {
      std::string folder = fmt::format("{}/heads{}-seed{}", config.out, heads, seed);
      std::string result_path = folder + "/result.json";
      if (fs::exists(result_path)) {
        fmt::print(stderr, "compare: heads {} seed {}: already done ({})\n", heads, seed, result_path);
        continue;
      }
      if (!data) {
        fmt::print(stderr, "compare: loading IMDb...\n");
        data = std::make_unique<Data>(prepare_data(config.base));
      }
      TrainConfig run = config.base;
      run.model.heads = heads;
      run.seed = uint64_t(seed);
      run.out = folder;
      fmt::print(stderr, "compare: training heads {} seed {} -> {}\n", heads, seed, folder);
      RunResult result = train_classifier(run, *data);
      EMBER_CHECK(result.stopped_by_signal == 0, "compare: heads {} seed {} stopped by signal {} at step {} of {}, "
                  "checkpointed; continue with --resume", heads, seed, result.stopped_by_signal, result.steps,
                  result.total_steps);
      if (!result.finished) {
        // Stopped part-way (--stop-after, a signal): no result.json, so that a later compare
        // (with --resume) continues this run rather than counting it as done.
        fmt::print(stderr, "compare: heads {} seed {} stopped at step {} of {}; continue with --resume\n", heads,
                   seed, result.steps, result.total_steps);
        return table_of_finished_runs(config);
      }
      write_file_atomically(result_path, summarize(result, folder).dump(2));
      // The table so far, after every run: a long comparison can be read (and stopped) part-way.
      write_file_atomically(config.out + "/compare.md", table_of_finished_runs(config));
    }
  }
  std::string table = table_of_finished_runs(config);
  write_file_atomically(config.out + "/compare.md", table);
  try {  // the page is a by-product: a failure is a warning, the table stands
    fmt::print(stderr, "compare: report {}\n", write_compare_report(config.out, config.heads, 0, config.base));
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: could not write {}/compare.html: {}\n", config.out, e.what());
  }
  return table;
}

}  // namespace ember::imdb
