// Tests for the IMDb vocabulary: counting, tie-breaking, specials, truncation, save/load.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/vocabulary.h"

using ember::imdb::Vocabulary;
using Tokens = std::vector<std::string>;
using Ids = std::vector<int32_t>;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
struct VocabularyTempDir {
  std::filesystem::path path;
  VocabularyTempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ember_vocabulary_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~VocabularyTempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& contents) const {
    std::ofstream(path / name, std::ios::binary) << contents;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("vocabulary: [PAD] and [UNK] first, then tokens by count") {
  Vocabulary vocabulary = Vocabulary::build_from_texts({"b a a", "c B a", "d"});
  // counts: a 3, b 2, c 1, d 1 (c before d: ties go by byte order)
  CHECK(vocabulary.tokens() == Tokens{"[PAD]", "[UNK]", "a", "b", "c", "d"});
  CHECK(vocabulary.size() == 6);
  CHECK(vocabulary.id("a") == 2);
  CHECK(vocabulary.id("d") == 5);
  CHECK(vocabulary.id("never-seen") == Vocabulary::unk_id);
  CHECK(vocabulary.token(Vocabulary::pad_id) == "[PAD]");
  CHECK(vocabulary.token(Vocabulary::unk_id) == "[UNK]");
  CHECK_THROWS_AS(vocabulary.token(6), ember::Error);
  CHECK_THROWS_AS(vocabulary.token(-1), ember::Error);
}

TEST_CASE("vocabulary: ties are broken by the token's bytes") {
  // All once: byte order puts ' (0x27) before digits (0x30..) before letters.
  Vocabulary vocabulary = Vocabulary::build_from_texts({"its it's it 9 'em ab a b"});
  CHECK(vocabulary.tokens() == Tokens{"[PAD]", "[UNK]", "'em", "9", "a", "ab", "b", "it", "it's", "its"});
}

TEST_CASE("vocabulary: max_words keeps the most frequent, the rest become [UNK]") {
  Vocabulary vocabulary = Vocabulary::build_from_texts({"x x x y y z w"}, 2);
  CHECK(vocabulary.tokens() == Tokens{"[PAD]", "[UNK]", "x", "y"});
  CHECK(vocabulary.encode("z x w y") == Ids{1, 2, 1, 3});
  CHECK(Vocabulary::build_from_texts({"a b"}, 0).size() == 2);
  CHECK_THROWS_AS(Vocabulary::build_from_texts({"a"}, -1), ember::Error);
}

TEST_CASE("vocabulary: counts whole reviews, before the 256-token truncation") {
  std::string long_review;
  for (int i = 0; i < 300; ++i) long_review += "filler ";
  long_review += "late late";  // tokens 301 and 302: past the truncation, still counted
  Vocabulary vocabulary = Vocabulary::build_from_texts({long_review, "early"});
  CHECK(vocabulary.tokens() == Tokens{"[PAD]", "[UNK]", "filler", "late", "early"});

  Ids encoded = vocabulary.encode(long_review);
  CHECK(encoded.size() == 256);
  CHECK(encoded == Ids(256, vocabulary.id("filler")));
  CHECK(vocabulary.encode(long_review, 302).back() == vocabulary.id("late"));
  CHECK(vocabulary.encode(long_review, 1000).size() == 302);
}

TEST_CASE("vocabulary: encode uses the tokenizer, unknown -> 1, no padding") {
  Vocabulary vocabulary = Vocabulary::build_from_texts({"good movie", "bad movie"});
  CHECK(vocabulary.encode("A GOOD<br />movie!!! Really.") == Ids{1, vocabulary.id("good"), vocabulary.id("movie"), 1});
  CHECK(vocabulary.encode("") == Ids{});
  CHECK(vocabulary.encode("good bad movie", 2) == Ids{vocabulary.id("good"), vocabulary.id("bad")});
  CHECK_THROWS_AS(vocabulary.encode("good", 0), ember::Error);

  std::vector<ember::imdb::Review> reviews{{"good", 1}, {"bad movie", 0}};
  CHECK(vocabulary.encode_all(reviews) == std::vector<Ids>{vocabulary.encode("good"), vocabulary.encode("bad movie")});
  CHECK(ember::imdb::labels_of(reviews) == std::vector<int>{1, 0});
}

TEST_CASE("vocabulary: built from the shipped small IMDb file matches the Python reference") {
  ember::imdb::ImdbSplit split = ember::imdb::load_reviews_json(std::string(EMBER_TEST_DATA) + "/imdb_small.json");
  Vocabulary vocabulary = Vocabulary::build(split.train);
  // Reference: Python's collections.Counter over
  //   re.findall(rb"[a-z0-9']+", t.encode().lower().replace(b"<br />", b" "))
  // on the 200 train reviews, sorted by (-count, token): 6154 distinct tokens.
  CHECK(vocabulary.size() == 6154 + 2);
  Tokens top(vocabulary.tokens().begin(), vocabulary.tokens().begin() + 14);
  CHECK(top == Tokens{"[PAD]", "[UNK]", "the", "a", "and", "of", "to", "is", "in", "i", "it", "this", "that", "movie"});
  // "never", "plot" and "scene" each appear 50 times: byte order among them.
  CHECK(vocabulary.id("never") + 1 == vocabulary.id("plot"));
  CHECK(vocabulary.id("plot") + 1 == vocabulary.id("scene"));
  CHECK(Vocabulary::build(split.train, 100).size() == 102);
}

TEST_CASE("vocabulary: save and load round trip") {
  VocabularyTempDir dir;
  Vocabulary original = Vocabulary::build_from_texts({"the cat's hat", "the 2 cats", "the end"});
  std::string path = (dir.path / "vocab.txt").string();
  original.save(path);
  Vocabulary loaded = Vocabulary::load(path);
  CHECK(loaded.tokens() == original.tokens());
  CHECK(loaded.encode("The cat's 2 hats") == original.encode("The cat's 2 hats"));

  // The file is plain text: a header and one token per line.
  std::ifstream in(path);
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  CHECK(header == "ember-vocabulary v1 " + std::to_string(original.size()));
  CHECK(first == "[PAD]");

  // Saving again replaces the file and leaves no temporary file behind.
  Vocabulary::build_from_texts({"other"}).save(path);
  CHECK(Vocabulary::load(path).tokens() == Tokens{"[PAD]", "[UNK]", "other"});
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("vocabulary: a failed save leaves the old file") {
  VocabularyTempDir dir;
  std::string path = (dir.path / "vocab.txt").string();
  Vocabulary::build_from_texts({"old"}).save(path);
  // Simulate a failure: something (a folder) already sits where the temporary file would go.
  std::filesystem::create_directory(path + ".tmp." + std::to_string(::getpid()));
  CHECK_THROWS_WITH_AS(Vocabulary::build_from_texts({"new"}).save(path), doctest::Contains(path.c_str()), ember::Error);
  CHECK(Vocabulary::load(path).tokens() == Tokens{"[PAD]", "[UNK]", "old"});
  CHECK_THROWS_AS(Vocabulary::build_from_texts({"x"}).save((dir.path / "no/such/dir/v.txt").string()), ember::Error);
}

TEST_CASE("vocabulary: loading a malformed file is a clear error naming the file") {
  VocabularyTempDir dir;
  auto expect_error = [&](const std::string& contents, const char* fragment) {
    std::string path = dir.file("bad.txt", contents);
    CAPTURE(contents);
    CHECK_THROWS_WITH_AS(Vocabulary::load(path), doctest::Contains(path.c_str()), ember::Error);
    CHECK_THROWS_WITH_AS(Vocabulary::load(path), doctest::Contains(fragment), ember::Error);
  };
  expect_error("", "empty");
  expect_error("ember-vocabulary v1 3\n[PAD]\n[UNK]\ngood", "newline");
  expect_error("something else\n[PAD]\n[UNK]\n", "line 1");
  expect_error("ember-vocabulary v1 abc\n[PAD]\n[UNK]\n", "bad size");
  expect_error("ember-vocabulary v1 1\n[PAD]\n", "bad size");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ngood\n", "header says 4 tokens but the file has 3");
  expect_error("ember-vocabulary v1 2\n[PAD]\n[UNK]\ngood\n", "header says 2");
  expect_error("ember-vocabulary v1 3\n[UNK]\n[PAD]\ngood\n", "line 2 must be [PAD]");
  expect_error("ember-vocabulary v1 3\n[PAD]\nunk\ngood\n", "line 3 must be [UNK]");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ngood\nBad\n", "line 5");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ngood\n\n", "line 5");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ntwo words\ngood\n", "line 4");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ngood\ngood\n", "listed twice");
  expect_error("ember-vocabulary v1 4\n[PAD]\n[UNK]\ngood\r\nbad\n", "Windows");
  CHECK_THROWS_WITH_AS(Vocabulary::load((dir.path / "missing.txt").string()), doctest::Contains("does not exist"),
                       ember::Error);
}
