// Vocabulary: counting tokens, choosing the top ones, encoding, and the text file format.
#include "examples/imdb/vocabulary.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "examples/imdb/tokenizer.h"

namespace ember::imdb {

namespace {

constexpr std::string_view file_tag = "ember-vocabulary v1";

// [PAD], [UNK], then the max_words most frequent tokens of all texts; text_at(i) gives text i.
template <typename TextAt>
std::vector<std::string> most_frequent_tokens(size_t text_count, TextAt&& text_at, int64_t max_words) {
  EMBER_CHECK(max_words >= 0, "Vocabulary::build: max_words must be >= 0, got {}", max_words);
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> counts;
  for (size_t i = 0; i < text_count; ++i) {
    for_each_token(text_at(i), [&](std::string_view token) {
      auto found = counts.find(token);
      if (found == counts.end()) counts.emplace(std::string(token), 1);
      else ++found->second;
      return true;
    });
  }

  // Most frequent first; equal counts in byte order of the token.
  std::vector<std::pair<std::string_view, int64_t>> ranked(counts.begin(), counts.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  size_t kept = std::min(ranked.size(), size_t(max_words));
  std::vector<std::string> tokens{std::string(Vocabulary::pad_token), std::string(Vocabulary::unk_token)};
  for (size_t i = 0; i < kept; ++i) tokens.emplace_back(ranked[i].first);
  return tokens;
}

bool is_token_text(std::string_view token) {
  return !token.empty() && std::all_of(token.begin(), token.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\'';
  });
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  ids_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) ids_.emplace(tokens_[id], int32_t(id));
}

Vocabulary Vocabulary::build(const std::vector<Review>& reviews, int64_t max_words) {
  auto text_at = [&](size_t i) -> std::string_view { return reviews[i].text; };
  return Vocabulary(most_frequent_tokens(reviews.size(), text_at, max_words));
}

Vocabulary Vocabulary::build_from_texts(const std::vector<std::string>& texts, int64_t max_words) {
  auto text_at = [&](size_t i) -> std::string_view { return texts[i]; };
  return Vocabulary(most_frequent_tokens(texts.size(), text_at, max_words));
}

int32_t Vocabulary::id(std::string_view token) const {
  auto found = ids_.find(token);
  return found == ids_.end() ? unk_id : found->second;
}

const std::string& Vocabulary::token(int32_t id) const {
  EMBER_CHECK(id >= 0 && id < size(), "Vocabulary::token: id {} is out of range [0, {})", id, size());
  return tokens_[size_t(id)];
}

std::vector<int32_t> Vocabulary::encode(std::string_view review, int64_t max_len) const {
  EMBER_CHECK(max_len > 0, "Vocabulary::encode: max_len must be > 0, got {}", max_len);
  std::vector<int32_t> ids;
  for_each_token(review, [&](std::string_view token) {
    ids.push_back(id(token));
    return int64_t(ids.size()) < max_len;  // stop tokenizing once we have max_len tokens
  });
  return ids;
}

std::vector<std::vector<int32_t>> Vocabulary::encode_all(const std::vector<Review>& reviews, int64_t max_len) const {
  std::vector<std::vector<int32_t>> encoded;
  encoded.reserve(reviews.size());
  for (const Review& review : reviews) encoded.push_back(encode(review.text, max_len));
  return encoded;
}

void Vocabulary::save(const std::string& path) const {
  std::string text = std::string(file_tag) + " " + std::to_string(tokens_.size()) + "\n";
  for (const std::string& token : tokens_) {
    text += token;
    text += '\n';
  }
  write_file_atomically(path, text);
}

Vocabulary Vocabulary::load(const std::string& path) {
  std::string text = read_whole_file(path, "vocabulary file");
  EMBER_CHECK(!text.empty(), "vocabulary file '{}' is empty", path);
  EMBER_CHECK(text.back() == '\n', "vocabulary file '{}' does not end with a newline (truncated?)", path);

  // Split into lines (each ends with '\n').
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    lines.push_back(std::string_view(text).substr(start, end - start));
    start = end + 1;
  }

  // Header: "ember-vocabulary v1 <size>".
  std::string_view header = lines[0];
  EMBER_CHECK(header.size() > file_tag.size() + 1 && header.substr(0, file_tag.size()) == file_tag &&
                  header[file_tag.size()] == ' ',
              "vocabulary file '{}': line 1 is '{}', expected '{} <size>' (not an Ember vocabulary file?)", path,
              header.substr(0, 80), file_tag);
  std::string_view size_text = header.substr(file_tag.size() + 1);
  int64_t declared_size = -1;
  auto [end, error] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), declared_size);
  EMBER_CHECK(error == std::errc() && end == size_text.data() + size_text.size() && declared_size >= 2 &&
                  declared_size <= INT32_MAX,
              "vocabulary file '{}': line 1 has a bad size '{}'", path, size_text);
  EMBER_CHECK(int64_t(lines.size()) - 1 == declared_size,
              "vocabulary file '{}': header says {} tokens but the file has {} (truncated or edited?)", path,
              declared_size, lines.size() - 1);

  EMBER_CHECK(lines[1] == pad_token, "vocabulary file '{}': line 2 must be {}, got '{}'", path, pad_token,
              lines[1].substr(0, 80));
  EMBER_CHECK(lines[2] == unk_token, "vocabulary file '{}': line 3 must be {}, got '{}'", path, unk_token,
              lines[2].substr(0, 80));
  std::unordered_set<std::string_view> seen;
  for (size_t line = 4; line <= lines.size(); ++line) {
    std::string_view token = lines[line - 1];
    EMBER_CHECK(token.find('\r') == std::string_view::npos,
                "vocabulary file '{}': line {} ends with '\\r' (Windows line endings?)", path, line);
    EMBER_CHECK(is_token_text(token), "vocabulary file '{}': line {} ('{}') is not a token of [a-z0-9']+", path,
                line, token.substr(0, 80));
    EMBER_CHECK(seen.insert(token).second, "vocabulary file '{}': line {}: token '{}' is listed twice", path, line,
                token);
  }
  return Vocabulary(std::vector<std::string>(lines.begin() + 1, lines.end()));
}

std::vector<int> labels_of(const std::vector<Review>& reviews) {
  std::vector<int> labels;
  labels.reserve(reviews.size());
  for (const Review& review : reviews) labels.push_back(review.label);
  return labels;
}

}  // namespace ember::imdb
