// The report's inputs: a run's metrics.jsonl, attention weights of a model on a few reviews,
// and the glue that builds report.html / compare.html from a run folder on disk.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "examples/imdb/report.h"
#include "examples/imdb/settings.h"
#include "nn/checkpoint.h"
#include "optim/optimizer.h"

namespace ember::imdb {
namespace fs = std::filesystem;

// ---- metrics.jsonl

Metrics read_metrics(const std::string& path) {
  std::istringstream in(read_whole_file(path, "metrics file"));  // a folder or a missing file is an error
  std::map<int64_t, StepRecord> steps;  // by step: a resumed run may log a step again
  std::map<int64_t, EpochRecord> epochs;
  double final_test = NAN;  // a "final" line's test accuracy (--test end)
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EMBER_CHECK(!j.is_discarded() && j.is_object() && j.contains("kind"), "{}:{}: not a metrics line: {}", path,
                number, line.substr(0, 80));
    // Every field read is checked: a step of 1e300 or 2^63 was converted to garbage and drawn.
    auto shown = [&](const char* key) { return j.contains(key) ? j[key].dump().substr(0, 40) : std::string("missing"); };
    auto integer = [&](const char* key, int64_t min, int64_t max) {
      const nlohmann::json* v = j.contains(key) ? &j[key] : nullptr;
      bool ok = false;
      int64_t value = 0;
      if (v != nullptr && v->is_number_unsigned()) {
        ok = v->get<uint64_t>() <= uint64_t(max);
        if (ok) value = int64_t(v->get<uint64_t>());
      } else if (v != nullptr && v->is_number_integer()) {
        value = v->get<int64_t>();
        ok = true;
      }
      EMBER_CHECK(ok && value >= min && value <= max, "{}:{}: field '{}' = {} is not an integer in [{}, {}]", path,
                  number, key, shown(key), min, max);
      return value;
    };
    // A real field may be absent or null (a NaN is written as null); anything else must be a number.
    auto real = [&](const char* key) {
      if (!j.contains(key) || j[key].is_null()) return double(NAN);
      EMBER_CHECK(j[key].is_number(), "{}:{}: field '{}' = {} is not a number", path, number, key, shown(key));
      return j[key].get<double>();
    };
    if (j["kind"] == "step") {
      StepRecord s{integer("step", 0, optim::Optimizer::max_steps), real("loss"), real("lr"), real("accuracy")};
      steps[s.step] = s;
    } else if (j["kind"] == "epoch") {
      EpochRecord e{integer("epoch", 1, limits::max_epochs), integer("step", 0, optim::Optimizer::max_steps),
                    real("train_loss"), real("test_accuracy"), real("train_seconds"), real("real_tokens_per_s"),
                    real("validation_accuracy"), real("masked_accuracy")};
      epochs[e.epoch] = e;
    } else if (j["kind"] == "final") {
      final_test = real("test_accuracy");
    }
  }
  Metrics m;
  m.final_test_accuracy = final_test;
  for (auto& [step, s] : steps) m.steps.push_back(s);
  for (auto& [epoch, e] : epochs) m.epochs.push_back(e);
  return m;
}

// ---- Attention maps

std::vector<size_t> pick_reviews(const std::vector<std::vector<int32_t>>& reviews, const std::vector<int>& labels,
                                 int64_t count, int64_t max_tokens) {
  std::vector<size_t> picked;
  int64_t want[2] = {count / 2, count - count / 2};
  for (size_t i = 0; i < reviews.size(); ++i) {
    int label = labels.at(i) ? 1 : 0;
    if (want[label] > 0 && int64_t(reviews[i].size()) <= max_tokens) {
      picked.push_back(i);
      --want[label];
    }
  }
  if (want[0] > 0 || want[1] > 0) {  // too few short reviews: add the shortest of each label left
    std::vector<size_t> order(reviews.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return reviews[a].size() < reviews[b].size(); });
    for (size_t i : order) {
      int label = labels.at(i) ? 1 : 0;
      if (want[label] > 0 && std::find(picked.begin(), picked.end(), i) == picked.end()) {
        picked.push_back(i);
        --want[label];
      }
    }
  }
  return picked;
}

AttentionExample attention_example(nn::TransformerClassifier& model, const Vocabulary& vocabulary,
                                   const std::vector<int32_t>& review, int label, int64_t max_tokens) {
  NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  const int64_t T = int64_t(review.size());
  Tensor tokens = from_vector(std::vector<int64_t>(review.begin(), review.end()), {1, T});
  std::vector<Tensor> weights;  // per layer [1, H, T, T]
  Tensor logits = model.forward(tokens, zeros({1, T}, Dtype::Bool), &weights);
  model.train(was_training);

  AttentionExample ex;
  for (int32_t id : review) ex.tokens.push_back(vocabulary.token(id));
  ex.label = label;
  ex.p_positive = softmax(logits, 1).to_vector<float>().at(1);
  ex.shown = std::min(T, max_tokens);
  for (const Tensor& w : weights) {
    const int64_t H = w.size(1);
    std::vector<float> all = w.contiguous().to_vector<float>();
    std::vector<std::vector<double>> heads(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t q = 0; q < ex.shown; ++q)
        for (int64_t k = 0; k < ex.shown; ++k) heads[size_t(h)].push_back(all[size_t((h * T + q) * T + k)]);
    ex.maps.push_back(std::move(heads));
  }
  return ex;
}

// ---- From disk

namespace {

std::vector<AttentionExample> examples_for(nn::TransformerClassifier& model, const Data& data,
                                           const std::vector<size_t>& picked) {
  std::vector<AttentionExample> out;
  for (size_t i : picked)
    out.push_back(attention_example(model, data.vocabulary, data.test_tokens[i], data.test_labels[i], kMaxMapTokens));
  return out;
}

// A saved run's model: model.safetensors, or the model part of checkpoint.safetensors (a run
// stopped before its first epoch ended has only the checkpoint).
SavedRun load_model_of(const std::string& folder) {
  if (fs::exists(folder + "/model.safetensors")) return load_run(folder);
  const std::string path = folder + "/checkpoint.safetensors";
  CheckpointInfo info = check_checkpoint(path);  // every number and tensor checked, as --resume would
  nn::TensorMap state = nn::load_weights(path);
  SavedRun run{info.config, Vocabulary::load(folder + "/vocab.txt"), nullptr};
  EMBER_CHECK(run.vocabulary.size() == run.config.model.vocab_size,
              "{}: vocab.txt has {} tokens but the model was trained with {}", folder, run.vocabulary.size(),
              run.config.model.vocab_size);
  Generator gen(0);
  run.model = std::make_shared<nn::TransformerClassifier>(run.config.model, gen);
  run.model->load_state_dict(nn::with_prefix_removed(state, "model."));
  run.model->eval();
  return run;
}

Data test_data_for(const SavedRun& run, const TrainConfig& data_config) {
  TrainConfig c = run.config;
  c.data = data_config.data;
  c.data_dir = data_config.data_dir;
  return prepare_data(c, &run.vocabulary);  // the run's own vocabulary and --limit
}

}  // namespace

void write_run_report(const std::string& folder, const TrainConfig& config, nn::TransformerClassifier& model,
                      const Data& data) {
  RunReport report;
  report.title = folder;
  report.settings = config.to_metadata();
  report.parameters = model.num_parameters();
  report.metrics = read_metrics(folder + "/metrics.jsonl");
  report.examples = examples_for(model, data, pick_reviews(data.test_tokens, data.test_labels, kReportReviews, kMaxMapTokens));
  write_file_atomically(folder + "/report.html", render_run_report(report));
}

std::string rebuild_run_report(const std::string& folder, const TrainConfig& data_config) {
  SavedRun run = load_model_of(folder);
  Data data = test_data_for(run, data_config);
  write_run_report(folder, run.config, *run.model, data);
  return folder + "/report.html";
}

std::string write_compare_report(const std::string& compare_folder, const std::vector<int64_t>& heads, int64_t seed,
                                 const TrainConfig& data_config) {
  std::vector<CompareColumn> models;
  std::vector<size_t> picked;  // chosen with the first model's data, the same reviews for every model
  std::unique_ptr<Data> data;
  for (int64_t h : heads) {
    std::string folder = fmt::format("{}/heads{}-seed{}", compare_folder, h, seed);
    if (!fs::exists(folder + "/metrics.jsonl")) continue;
    SavedRun run = load_model_of(folder);
    // Runs of one comparison share their settings and data, hence their vocabulary: load the data once.
    if (!data || data->vocabulary.tokens() != run.vocabulary.tokens())
      data = std::make_unique<Data>(test_data_for(run, data_config));
    if (models.empty()) picked = pick_reviews(data->test_tokens, data->test_labels, kCompareReviews, kMaxMapTokens);
    models.push_back({h, folder, read_metrics(folder + "/metrics.jsonl"), examples_for(*run.model, *data, picked)});
  }
  EMBER_CHECK(!models.empty(), "compare report: no finished runs heads<h>-seed{} in '{}'", seed, compare_folder);
  std::string path = compare_folder + "/compare.html";
  write_file_atomically(path, render_compare_report(compare_folder, models));
  return path;
}

}  // namespace ember::imdb
