// The IMDb trainer on the shipped small data: the loss falls, and a resumed run matches an uninterrupted one.
#include <filesystem>

#include "examples/imdb/compare.h"
#include "examples/imdb/trainer.h"
#include "helpers.h"
#include "imdb_helpers.h"

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
  RunResult r = train(config, data);
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
  RunResult whole = train(config, data);

  TrainConfig first_part = config;
  first_part.out = tiny_config("parts").out;
  first_part.stop_after = 11;  // mid-way through epoch 1
  RunResult part1 = train(first_part, data);
  REQUIRE(part1.step_losses.size() == 11);
  TrainConfig second_part = first_part;
  second_part.stop_after = 0;
  second_part.resume = true;
  RunResult part2 = train(second_part, data);
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
  RunResult unbucketed = train(plain, data);
  TrainConfig config = plain;
  config.out = tiny_config("bucketed").out;
  config.length_buckets = 4;
  RunResult whole = train(config, data);
  CHECK(whole.step_losses != unbucketed.step_losses);  // other batches
  // The share of padding in the tokens processed: real / padded tokens per second of the same epoch.
  auto real_share = [](const EpochResult& e) { return e.real_tokens_per_s / e.padded_tokens_per_s; };
  INFO("real tokens / padded tokens: " << real_share(unbucketed.epochs[0]) << " plain, " << real_share(whole.epochs[0])
                                        << " bucketed");
  CHECK(real_share(whole.epochs[0]) > real_share(unbucketed.epochs[0]) + 0.15);

  TrainConfig first_part = config;
  first_part.out = tiny_config("bucketed_parts").out;
  first_part.stop_after = 6;  // mid-way through the epoch's 13 steps
  RunResult part1 = train(first_part, data);
  REQUIRE(part1.step_losses.size() == 6);
  TrainConfig other = first_part;
  other.stop_after = 0;
  other.resume = true;
  other.length_buckets = 0;
  ember::testing::check_error([&] { train(other, data); }, "length_buckets");
  TrainConfig second_part = other;
  second_part.length_buckets = 4;
  RunResult part2 = train(second_part, data);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(joined == whole.step_losses);  // bit for bit
  CHECK(part2.epochs.back().test_accuracy == whole.epochs.back().test_accuracy);
}

TEST_CASE("train: bad settings and unwritable folders are clear errors before training") {
  TrainConfig config = tiny_config("bad");
  config.data = "/nonexistent/reviews.json";
  ember::testing::check_error([&] { train(config); }, "/nonexistent/reviews.json");
  config = tiny_config("bad2");
  config.out = "/proc/ember-cannot-write-here";
  ember::testing::check_error([&] { train(config); }, "/proc/ember-cannot-write-here");
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
