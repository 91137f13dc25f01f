// Whole reviews in the trainer: truncation (head, tail, head+tail), the --attention setting's text form,
// the settings' range checks and their record in a checkpoint's metadata, and a small run with window
// attention and activation checkpointing end to end.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/attention_band.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/tokenizer.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/truncation.h"
#include "examples/imdb/vocabulary.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;

namespace {
// A vocabulary where word wN has an id that tells N: ids 2.. in order of the build's counts.
std::vector<int32_t> ids_of(const Vocabulary& v, std::initializer_list<const char*> words) {
  std::vector<int32_t> ids;
  for (const char* w : words) ids.push_back(v.id(w));
  return ids;
}
}  // namespace

TEST_CASE("long reviews: head, tail and head+tail keep the right tokens") {
  Vocabulary v = Vocabulary::build_from_texts({"a b c d e f g h i j"});
  const std::string review = "a b c d e f g h i j";
  CHECK(encode_truncated(v, review, 4, "head") == ids_of(v, {"a", "b", "c", "d"}));
  CHECK(encode_truncated(v, review, 4, "tail") == ids_of(v, {"g", "h", "i", "j"}));
  CHECK(encode_truncated(v, review, 4, "head+tail") == ids_of(v, {"a", "h", "i", "j"}));  // 4 / 4 = 1 head token
  CHECK(encode_truncated(v, review, 8, "head+tail") == ids_of(v, {"a", "b", "e", "f", "g", "h", "i", "j"}));
  CHECK(encode_truncated(v, review, 3, "head+tail") == ids_of(v, {"h", "i", "j"}));  // 3 / 4 = 0 head tokens
  for (const char* mode : {"head", "tail", "head+tail"}) {  // short reviews are kept whole
    CHECK(encode_truncated(v, review, 10, mode) == v.encode(review, 100));
    CHECK(encode_truncated(v, review, 50, mode) == v.encode(review, 100));
    CHECK(encode_truncated(v, "", 5, mode).empty());
  }
  CHECK(is_truncation("head+tail"));
  CHECK_FALSE(is_truncation("middle"));
}

TEST_CASE("long reviews: --attention's text form parses strictly and reads back") {
  auto parsed = [](const std::string& text) { return parse_attention_band(text, 4096); };
  REQUIRE(parsed("full"));
  CHECK(parsed("full")->window == -1);
  REQUIRE(parsed("window:256"));
  CHECK(parsed("window:256")->window == 256);
  CHECK(parsed("window:256")->global == 0);
  REQUIRE(parsed("window:0,global:1"));
  CHECK(parsed("window:0,global:1")->global == 1);
  for (const char* bad : {"", "Full", "window", "window:", "window:-1", "window:1e3", "window:12abc", "window: 5",
                          "window:5,", "window:5,global:", "window:5,global:-1", "window:5,globals:2", "window:4097",
                          "window:5,global:2,x", "sliding:5"}) {
    CAPTURE(bad);
    CHECK_FALSE(parsed(bad));
  }
  for (const char* text : {"full", "window:7", "window:256,global:1"}) CHECK(attention_band_text(*parsed(text)) == text);
}

TEST_CASE("long reviews: the settings are range-checked and recorded in a checkpoint's metadata") {
  TrainConfig c;
  c.model.max_len = 4096;
  c.truncate = "head+tail";
  c.model.attention_window = 128;
  c.model.attention_global = 1;
  c.model.checkpoint = true;
  c.validate();
  auto meta = c.to_metadata();
  CHECK(meta.at("truncate") == "head+tail");
  CHECK(meta.at("attention") == "window:128,global:1");
  CHECK(meta.at("checkpoint") == "1");
  TrainConfig back = TrainConfig::from_metadata(meta);
  CHECK(back.truncate == "head+tail");
  CHECK(back.model.attention_window == 128);
  CHECK(back.model.attention_global == 1);
  CHECK(back.model.checkpoint);
  CHECK(back.model.max_len == 4096);
  // A file written before these settings existed is a run of the defaults.
  for (const char* key : {"truncate", "attention", "checkpoint"}) meta.erase(key);
  back = TrainConfig::from_metadata(meta);
  CHECK(back.truncate == "head");
  CHECK(back.model.attention_window == -1);
  CHECK_FALSE(back.model.checkpoint);
  // Bad values, in the settings and in a file.
  TrainConfig bad = c;
  bad.truncate = "middle";
  check_error([&] { bad.validate(); }, "setting truncate = 'middle'");
  bad = c;
  bad.model.attention_window = 5000;
  check_error([&] { bad.validate(); }, "setting attention window = 5000 is out of range [-1, 4096]");
  bad = c;
  bad.model.attention_window = -1;
  check_error([&] { bad.validate(); }, "global tokens (1) need a window");
  meta = c.to_metadata();
  meta["attention"] = "window:x";
  check_error([&] { TrainConfig::from_metadata(meta); }, "checkpoint metadata 'attention' = 'window:x'");
  meta = c.to_metadata();
  meta["checkpoint"] = "yes";
  check_error([&] { TrainConfig::from_metadata(meta); }, "checkpoint metadata 'checkpoint' = 'yes'");
  meta = c.to_metadata();
  meta["truncate"] = "all";
  check_error([&] { TrainConfig::from_metadata(meta); }, "setting truncate = 'all'");
}

TEST_CASE("long reviews: a run with window attention, head+tail and checkpointing trains and saves its settings") {
  TrainConfig config = ember::testing::tiny_train_config("ember_long", "window");
  config.truncate = "head+tail";
  config.model.attention_window = 4;
  config.model.attention_global = 1;
  config.model.checkpoint = true;
  config.epochs = 1;
  Data data = prepare_data(config);
  RunResult result = train_classifier(config, data);
  CHECK(result.epochs.back().test_accuracy > 0.0);
  SavedRun saved = load_run(config.out);
  CHECK(saved.config.truncate == "head+tail");
  CHECK(saved.config.model.attention_window == 4);
  CHECK(saved.config.model.attention_global == 1);
  CHECK(saved.config.model.checkpoint);
  CHECK(saved.model->blocks[0]->attention->window == 4);
  CHECK(evaluate(*saved.model, data.test_tokens, data.test_labels) == doctest::Approx(result.epochs.back().test_accuracy));
}

TEST_CASE("long reviews: accuracy by whole length splits the test set by its tokens before truncation") {
  TrainConfig config = ember::testing::tiny_train_config("ember_long", "by_length");
  config.model.max_len = 32;  // most of the small set's reviews are longer: cut
  config.epochs = 1;
  Data data = prepare_data(config);
  // The lengths are the whole reviews' token counts, in the test set's order.
  const ImdbSplit split = load_imdb(config.data);
  REQUIRE(data.test_lengths.size() == split.test.size());
  int64_t longer = 0;
  for (size_t r = 0; r < split.test.size(); ++r) {
    CHECK(data.test_lengths[r] == int64_t(tokenize(split.test[r].text).size()));
    CHECK(int64_t(data.test_tokens[r].size()) == std::min<int64_t>(data.test_lengths[r], config.model.max_len));
    longer += data.test_lengths[r] > config.model.max_len;
  }
  REQUIRE(longer > 0);
  REQUIRE(longer < int64_t(split.test.size()));

  train_classifier(config, data);
  SavedRun saved = load_run(config.out);
  const std::vector<int64_t> bounds = {32, 100};
  const std::vector<LengthBucket> buckets = accuracy_by_length(*saved.model, data, bounds);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].shortest == 0);
  CHECK(buckets[0].longest == 32);
  CHECK(buckets[1].shortest == 33);
  CHECK(buckets[1].longest == 100);
  CHECK(buckets[2].shortest == 101);
  CHECK(buckets[2].longest == -1);
  // Each bucket is the reviews of its lengths, counted here independently, and its accuracy is evaluate's on them.
  int64_t total = 0, correct = 0;
  for (const LengthBucket& bucket : buckets) {
    std::vector<std::vector<int32_t>> reviews;
    std::vector<int> labels;
    for (size_t r = 0; r < split.test.size(); ++r) {
      const int64_t n = int64_t(tokenize(split.test[r].text).size());
      if (n >= bucket.shortest && (bucket.longest < 0 || n <= bucket.longest)) {
        reviews.push_back(data.test_tokens[r]);
        labels.push_back(split.test[r].label);
      }
    }
    CHECK(bucket.reviews > 0);  // the bounds split the small set's test reviews three ways
    CHECK(bucket.reviews == int64_t(reviews.size()));
    CHECK(bucket.accuracy() == evaluate(*saved.model, reviews, labels));
    total += bucket.reviews;
    correct += bucket.correct;
  }
  CHECK(total == int64_t(split.test.size()));
  // The buckets' correct predictions add up to the whole set's (imdb eval --by-length prints their sum).
  CHECK(double(correct) / double(total) == evaluate(*saved.model, data.test_tokens, data.test_labels));
  // No bounds: one bucket, all of them.
  const std::vector<LengthBucket> all = accuracy_by_length(*saved.model, data, {});
  REQUIRE(all.size() == 1);
  CHECK(all[0].reviews == total);
  check_error([&] { accuracy_by_length(*saved.model, data, {100, 32}); }, "bounds must be increasing");
  Data unmeasured = data;
  unmeasured.test_lengths.pop_back();
  check_error([&] { accuracy_by_length(*saved.model, unmeasured, bounds); }, "lengths for");
}
