// The IMDb vocabulary: [PAD], [UNK], then the most frequent training tokens; encode, save and load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "examples/imdb/dataset.h"

namespace ember::imdb {

// A hash for unordered_map<std::string, ...> that lets find() take a std::string_view
// without building a std::string (C++20 heterogeneous lookup; needs std::equal_to<>).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

class Vocabulary {
 public:
  static constexpr int32_t pad_id = 0;
  static constexpr int32_t unk_id = 1;
  static constexpr std::string_view pad_token = "[PAD]";
  static constexpr std::string_view unk_token = "[UNK]";
  static constexpr int64_t default_max_words = 20000;  // the recipe: size 20,002 with the two specials
  static constexpr int64_t default_max_len = 256;      // the recipe: first 256 tokens of each review

  // Counts every token of every review (whole reviews, before any truncation) and keeps the
  // max_words most frequent, ties broken by the token's bytes (so "a" before "b").
  // Ids: 0 = [PAD], 1 = [UNK], then 2, 3, ... from the most frequent token down.
  // Fewer distinct tokens than max_words gives a smaller vocabulary.
  static Vocabulary build(const std::vector<Review>& reviews, int64_t max_words = default_max_words);
  static Vocabulary build_from_texts(const std::vector<std::string>& texts, int64_t max_words = default_max_words);

  // Plain text, one token per line in id order, after a header line
  // "ember-vocabulary v1 <size>". save() is atomic (temporary file + rename).
  void save(const std::string& path) const;
  // Throws ember::Error naming the file and line if it is missing, truncated or malformed.
  static Vocabulary load(const std::string& path);

  int64_t size() const { return int64_t(tokens_.size()); }
  // The id of a token, or unk_id if it is not in the vocabulary.
  int32_t id(std::string_view token) const;
  // The token of an id; throws ember::Error if the id is out of range.
  const std::string& token(int32_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  // Token ids of the review's first max_len tokens (unknown tokens -> unk_id). No padding:
  // the batcher pads each batch to its own longest review.
  std::vector<int32_t> encode(std::string_view review, int64_t max_len = default_max_len) const;
  std::vector<std::vector<int32_t>> encode_all(const std::vector<Review>& reviews,
                                               int64_t max_len = default_max_len) const;

 private:
  explicit Vocabulary(std::vector<std::string> tokens);

  std::vector<std::string> tokens_;  // id -> token
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;  // token -> id
};

// The labels of the reviews, in order (for the batcher).
std::vector<int> labels_of(const std::vector<Review>& reviews);

}  // namespace ember::imdb
