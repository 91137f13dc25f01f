// The IMDb recipe's tokenizer: lowercase, "<br />" -> space, tokens = maximal runs of [a-z0-9'].
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ember::imdb {

// Splits a review into tokens, exactly as the recipe says:
//   - ASCII letters are lowercased;
//   - every "<br />" (in any letter case, since lowercasing comes first) counts as a space;
//   - a token is a maximal run of bytes in [a-z0-9'];
//   - every other byte separates tokens, including each byte of a non-ASCII UTF-8 character.
// Example: "Don't<br />STOP, 2x—fun!" -> {"don't", "stop", "2x", "fun"}.
// NOTE: the rule is on bytes. The equivalent Python (for the PyTorch side) is
//   re.findall(rb"[a-z0-9']+", text.encode("utf-8").lower().replace(b"<br />", b" "))
// Do not use str.lower() on Unicode text: e.g. the Kelvin sign U+212A lowercases to 'k'.
std::vector<std::string> tokenize(std::string_view review);

// The same tokens without building a vector: calls on_token(std::string_view) for each
// token in order, and stops early as soon as on_token returns false. The view is only
// valid during the call (it points into a reused buffer).
template <typename OnToken>
void for_each_token(std::string_view review, OnToken&& on_token);

// ---- implementation ----

namespace detail {

// Lowercased token byte, or 0 if the byte separates tokens.
inline char token_char(char c) {
  if (c >= 'a' && c <= 'z') return c;
  if (c >= 'A' && c <= 'Z') return char(c - 'A' + 'a');
  if ((c >= '0' && c <= '9') || c == '\'') return c;
  return 0;
}

// True if "<br />" (letters in any case) starts at position i.
inline bool line_break_at(std::string_view text, size_t i) {
  return i + 6 <= text.size() && text[i] == '<' && (text[i + 1] | 0x20) == 'b' &&
         (text[i + 2] | 0x20) == 'r' && text[i + 3] == ' ' && text[i + 4] == '/' && text[i + 5] == '>';
}

}  // namespace detail

template <typename OnToken>
void for_each_token(std::string_view review, OnToken&& on_token) {
  std::string token;  // reused for every token: no allocation per token once it has grown
  size_t i = 0;
  while (i < review.size()) {
    // NOTE: "<br />" starts with '<', a separator, so skipping it whole is the same as
    // replacing it with a space; scanning left to right matches str.replace's choices.
    if (detail::line_break_at(review, i)) {
      i += 6;
    } else if (char c = detail::token_char(review[i])) {
      token += c;
      ++i;
      continue;
    } else {
      ++i;
    }
    if (!token.empty()) {
      if (!on_token(std::string_view(token))) return;
      token.clear();
    }
  }
  if (!token.empty()) on_token(std::string_view(token));
}

}  // namespace ember::imdb
