// The IMDb trainer on the shipped small data: the loss falls, and a resumed run matches an uninterrupted one.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/imdb/compare.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::tiny_train_config;
namespace fs = std::filesystem;

namespace {
TrainConfig tiny_config(const std::string& out) { return tiny_train_config("ember_train", out); }
double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / double(end - begin);
}
}  // namespace

TEST_CASE("train: a small model's loss falls on the shipped reviews, and outputs are written") {
  TrainConfig config = tiny_config("falls");
  Data data = prepare_data(config);
  REQUIRE(data.train_tokens.size() >= 100);
  RunResult r = train_classifier(config, data);
  size_t per_epoch = r.step_losses.size() / size_t(config.epochs);
  double first = mean_of(r.step_losses, 0, per_epoch);
  double last = mean_of(r.step_losses, r.step_losses.size() - per_epoch, r.step_losses.size());
  INFO("first epoch mean loss " << first << ", last " << last);
  CHECK(last < first - 0.1);
  REQUIRE(r.epochs.size() == size_t(config.epochs));
  CHECK(r.epochs.back().test_accuracy > 0.5);
  for (const char* file : {"metrics.jsonl", "model.safetensors", "checkpoint.safetensors", "vocab.txt", "report.html"})
    CHECK(fs::exists(config.out + "/" + file));
  // The saved run predicts the same as the trained model evaluated here.
  SavedRun saved = load_run(config.out);
  CHECK(evaluate(*saved.model, data.test_tokens, data.test_labels) == doctest::Approx(r.epochs.back().test_accuracy));
}

TEST_CASE("train: resuming from a mid-epoch checkpoint gives the same losses as one run") {
  TrainConfig config = tiny_config("whole");
  config.epochs = 2;
  Data data = prepare_data(config);
  RunResult whole = train_classifier(config, data);

  TrainConfig first_part = config;
  first_part.out = tiny_config("parts").out;
  first_part.stop_after = 11;  // mid-way through epoch 1
  RunResult part1 = train_classifier(first_part, data);
  REQUIRE(part1.step_losses.size() == 11);
  TrainConfig second_part = first_part;
  second_part.stop_after = 0;
  second_part.resume = true;
  RunResult part2 = train_classifier(second_part, data);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(joined == whole.step_losses);  // bit for bit
  CHECK(part2.epochs.back().test_accuracy == whole.epochs.back().test_accuracy);
}

TEST_CASE("train: --length-buckets pads less, resumes mid-epoch bit for bit, and is a setting --resume must match") {
  TrainConfig plain = tiny_config("plain_order");
  plain.epochs = 1;
  plain.model.max_len = 512;  // the reviews' own lengths (at 64 nearly all are cut to the same)
  Data data = prepare_data(plain);
  RunResult unbucketed = train_classifier(plain, data);
  TrainConfig config = plain;
  config.out = tiny_config("bucketed").out;
  config.length_buckets = 4;
  RunResult whole = train_classifier(config, data);
  CHECK(whole.step_losses != unbucketed.step_losses);  // other batches
  // The share of padding in the tokens processed: real / padded tokens per second of the same epoch.
  auto real_share = [](const EpochResult& e) { return e.real_tokens_per_s / e.padded_tokens_per_s; };
  INFO("real tokens / padded tokens: " << real_share(unbucketed.epochs[0]) << " plain, " << real_share(whole.epochs[0])
                                        << " bucketed");
  CHECK(real_share(whole.epochs[0]) > real_share(unbucketed.epochs[0]) + 0.15);

  TrainConfig first_part = config;
  first_part.out = tiny_config("bucketed_parts").out;
  first_part.stop_after = 6;  // mid-way through the epoch's 13 steps
  RunResult part1 = train_classifier(first_part, data);
  REQUIRE(part1.step_losses.size() == 6);
  TrainConfig other = first_part;
  other.stop_after = 0;
  other.resume = true;
  other.length_buckets = 0;
  ember::testing::check_error([&] { train_classifier(other, data); }, "length_buckets");
  TrainConfig second_part = other;
  second_part.length_buckets = 4;
  RunResult part2 = train_classifier(second_part, data);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(joined == whole.step_losses);  // bit for bit
  CHECK(part2.epochs.back().test_accuracy == whole.epochs.back().test_accuracy);
}

TEST_CASE("train: --validation holds out the same training reviews for every seed and names the best epoch by them") {
  TrainConfig none = tiny_config("validation_none");
  none.epochs = 2;
  const Data all = prepare_data(none);
  TrainConfig config = none;
  config.out = tiny_config("validation").out;
  config.validation = 40;
  // With the same vocabulary, the reviews are comparable: the training reviews are the full set's minus 40,
  // in their order, and the 40 held out are the rest.
  const Data split = prepare_data(config, &all.vocabulary);
  REQUIRE(split.validation_tokens.size() == 40);
  REQUIRE(split.validation_labels.size() == 40);
  REQUIRE(split.train_tokens.size() == all.train_tokens.size() - 40);
  size_t kept = 0, held = 0;
  for (size_t i = 0; i < all.train_tokens.size(); ++i) {
    if (kept < split.train_tokens.size() && split.train_tokens[kept] == all.train_tokens[i] &&
        split.train_labels[kept] == all.train_labels[i]) {
      ++kept;
    } else {
      REQUIRE(held < 40);
      CHECK(split.validation_tokens[held] == all.train_tokens[i]);
      CHECK(split.validation_labels[held] == all.train_labels[i]);
      ++held;
    }
  }
  CHECK(kept == split.train_tokens.size());
  CHECK(held == 40);
  int positives = 0;
  for (int label : split.validation_labels) positives += label;
  CHECK(positives > 0);  // a shuffle, not the file's first or last 40 (one label each)
  CHECK(positives < 40);
  CHECK(split.test_tokens == all.test_tokens);  // test is untouched
  TrainConfig other_seed = config;
  other_seed.seed = 7;
  CHECK(prepare_data(other_seed, &all.vocabulary).validation_tokens == split.validation_tokens);
  // Each epoch evaluates it; the best epoch by it is named, and recorded in metrics.jsonl.
  const Data data = prepare_data(config);
  RunResult result = train_classifier(config, data);
  REQUIRE(result.epochs.size() == 2);
  for (const EpochResult& e : result.epochs) {
    CHECK(e.validation_accuracy >= 0.0);
    CHECK(e.validation_accuracy <= 1.0);
  }
  const int64_t want_best = result.epochs[1].validation_accuracy > result.epochs[0].validation_accuracy ? 2 : 1;
  CHECK(result.best_validation_epoch == want_best);
  int epoch_lines = 0;
  std::ifstream metrics(config.out + "/metrics.jsonl");
  for (std::string text; std::getline(metrics, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    if (line.value("kind", "") != "epoch") continue;
    ++epoch_lines;
    CHECK(line.at("validation_reviews") == 40);
    CHECK(line.at("validation_accuracy").get<double>() ==
          result.epochs[size_t(line.at("epoch").get<int>() - 1)].validation_accuracy);
  }
  CHECK(epoch_lines == 2);
  // A setting of the run: in the metadata (a file from before it reads as 0), and --resume must match it.
  CHECK(config.to_metadata().at("validation") == "40");
  std::map<std::string, std::string> meta = config.to_metadata();
  CHECK(TrainConfig::from_metadata(meta).validation == 40);
  meta.erase("validation");
  CHECK(TrainConfig::from_metadata(meta).validation == 0);
  TrainConfig resumed = config;
  resumed.resume = true;
  resumed.validation = 30;
  ember::testing::check_error([&] { train_classifier(resumed, prepare_data(resumed)); }, "validation");
  // Without it: no validation accuracy, no best epoch; and it must leave training reviews to train on.
  RunResult plain = train_classifier(none, all);
  CHECK(std::isnan(plain.epochs[0].validation_accuracy));
  CHECK(plain.best_validation_epoch == 0);
  TrainConfig too_many = none;
  too_many.validation = int64_t(all.train_tokens.size());
  ember::testing::check_error([&] { prepare_data(too_many); },
                              fmt::format("--validation {}: there are only {} training reviews", too_many.validation,
                                          all.train_tokens.size()));
}

TEST_CASE("train: --test says when the test reviews are read; with a validation set, once at the end by default") {
  TrainConfig config = tiny_config("test_once");
  config.validation = 40;
  config.epochs = 2;
  const Data data = prepare_data(config);
  const auto lines_of = [](const std::string& folder, const std::string& kind) {
    std::vector<nlohmann::json> lines;
    std::ifstream metrics(folder + "/metrics.jsonl");
    for (std::string text; std::getline(metrics, text);) {
      nlohmann::json line = nlohmann::json::parse(text);
      if (line.value("kind", "") == kind) lines.push_back(line);
    }
    return lines;
  };
  REQUIRE_FALSE(config.tests_every_epoch());  // auto: end, with a validation set
  const RunResult once = train_classifier(config, data);
  REQUIRE(once.epochs.size() == 2);
  for (const EpochResult& e : once.epochs) CHECK(std::isnan(e.test_accuracy));
  for (const nlohmann::json& line : lines_of(config.out, "epoch")) {
    CHECK_FALSE(line.contains("test_accuracy"));
    CHECK(line.contains("validation_accuracy"));
  }
  const std::vector<nlohmann::json> finals = lines_of(config.out, "final");
  REQUIRE(finals.size() == 1);
  CHECK(finals[0].at("test_accuracy").get<double>() == once.final_test_accuracy);
  // It is the final model's accuracy on every test review (what imdb eval reads from model.safetensors).
  const SavedRun saved = load_run(config.out);
  CHECK(evaluate(*saved.model, data.test_tokens, data.test_labels) == once.final_test_accuracy);
  // The same training either way: --test epoch reads them after each epoch as well, and the weights are the same.
  TrainConfig every = config;
  every.out = tiny_config("test_every").out;
  every.test = "epoch";
  const RunResult each = train_classifier(every, data);
  REQUIRE(each.epochs.size() == 2);
  CHECK(each.epochs.back().test_accuracy == once.final_test_accuracy);
  CHECK(each.final_test_accuracy == once.final_test_accuracy);
  CHECK(each.step_losses == once.step_losses);
  for (const nlohmann::json& line : lines_of(every.out, "epoch")) CHECK(line.contains("test_accuracy"));
  // Without a validation set, auto reads them every epoch (the recipe).
  TrainConfig plain = tiny_config("test_auto");
  CHECK(plain.tests_every_epoch());
  plain.test = "end";
  CHECK_FALSE(plain.tests_every_epoch());
}

TEST_CASE("train: bad settings and unwritable folders are clear errors before training") {
  TrainConfig config = tiny_config("bad");
  config.data = "/nonexistent/reviews.json";
  ember::testing::check_error([&] { train_classifier(config); }, "/nonexistent/reviews.json");
  config = tiny_config("bad2");
  config.out = "/proc/ember-cannot-write-here";
  ember::testing::check_error([&] { train_classifier(config); }, "/proc/ember-cannot-write-here");
}

TEST_CASE("compare: trains every head count and seed once, writes the table, and skips finished runs") {
  CompareConfig config;
  config.base = tiny_config("compare");
  config.base.epochs = 1;
  config.heads = {1, 2};
  config.seeds = 2;
  config.out = config.base.out;
  std::string table = compare(config);
  for (const char* run : {"heads1-seed0", "heads2-seed0", "heads1-seed1", "heads2-seed1"})
    CHECK(fs::exists(config.out + "/" + run + "/result.json"));
  CHECK(table.find("| 1 | 16 |") != std::string::npos);
  CHECK(table.find("| 2 | 8 |") != std::string::npos);
  CHECK(fs::exists(config.out + "/compare.html"));
  for (const char* run : {"heads1-seed0", "heads2-seed1"}) CHECK(fs::exists(config.out + "/" + run + "/report.html"));
  // A second call trains nothing (the model files are untouched) and gives the same table.
  auto stamp = fs::last_write_time(config.out + "/heads2-seed1/model.safetensors");
  CHECK(compare(config) == table);
  CHECK(fs::last_write_time(config.out + "/heads2-seed1/model.safetensors") == stamp);
}
