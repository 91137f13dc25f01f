// Tests for the IMDb tokenizer: the recipe's exact rules on small known strings.
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "examples/imdb/tokenizer.h"

using ember::imdb::tokenize;
using Tokens = std::vector<std::string>;

TEST_CASE("tokenizer: empty and separator-only input give no tokens") {
  CHECK(tokenize("") == Tokens{});
  CHECK(tokenize("   ") == Tokens{});
  CHECK(tokenize("!?.,;:-()") == Tokens{});
  CHECK(tokenize("<br />") == Tokens{});
}

TEST_CASE("tokenizer: lowercases ASCII letters and splits on everything else") {
  CHECK(tokenize("Hello, World!") == Tokens{"hello", "world"});
  CHECK(tokenize("ABC123def") == Tokens{"abc123def"});
  CHECK(tokenize("hyphen-ated under_score slash/word") == Tokens{"hyphen", "ated", "under", "score", "slash", "word"});
  CHECK(tokenize("a\tb\nc\r\nd") == Tokens{"a", "b", "c", "d"});
  CHECK(tokenize(std::string_view("a\0b", 3)) == Tokens{"a", "b"});
}

TEST_CASE("tokenizer: digits and apostrophes belong to tokens") {
  CHECK(tokenize("Don't stop") == Tokens{"don't", "stop"});
  CHECK(tokenize("'tis the 80's, 10/10") == Tokens{"'tis", "the", "80's", "10", "10"});
  CHECK(tokenize("rock 'n' roll") == Tokens{"rock", "'n'", "roll"});
  CHECK(tokenize("''") == Tokens{"''"});
}

TEST_CASE("tokenizer: every <br /> counts as a space") {
  CHECK(tokenize("line one<br />line two") == Tokens{"line", "one", "line", "two"});
  CHECK(tokenize("end.<br /><br />Next") == Tokens{"end", "next"});
  CHECK(tokenize("a<br />b") == Tokens{"a", "b"});
  // Lowercasing comes first, so the upper-case tag is a line break too.
  CHECK(tokenize("a<BR />b<Br />c") == Tokens{"a", "b", "c"});
  // Only the exact "<br />" is replaced; other spellings leave the letters "br" as a token.
  CHECK(tokenize("a<br/>b") == Tokens{"a", "br", "b"});
  CHECK(tokenize("a<br>b") == Tokens{"a", "br", "b"});
  CHECK(tokenize("a<br /") == Tokens{"a", "br"});
  CHECK(tokenize("<br /<br />>") == Tokens{"br"});
  // Matters when "<br />" touches a word: the "br" of the tag is not glued to it.
  CHECK(tokenize("word<br />") == Tokens{"word"});
}

TEST_CASE("tokenizer: every byte of a non-ASCII character separates tokens") {
  CHECK(tokenize("café") == Tokens{"caf"});                   // é is 2 bytes
  CHECK(tokenize("naïve") == Tokens{"na", "ve"});
  CHECK(tokenize("2x\xE2\x80\x94" "fun") == Tokens{"2x", "fun"});  // em dash
  CHECK(tokenize("it\xE2\x80\x99s") == Tokens{"it", "s"});     // curly apostrophe is not '
  CHECK(tokenize("\xC3\x89T\xC3\x89") == Tokens{"t"});          // ÉTÉ: only the ASCII T survives
  CHECK(tokenize("\xFF\xFE" "ok") == Tokens{"ok"});             // invalid UTF-8 is just separators
}

TEST_CASE("tokenizer: for_each_token gives the same tokens and can stop early") {
  std::string review = "One two<br />THREE four's 5";
  Tokens seen;
  ember::imdb::for_each_token(review, [&](std::string_view token) {
    seen.emplace_back(token);
    return true;
  });
  CHECK(seen == tokenize(review));
  CHECK(seen == Tokens{"one", "two", "three", "four's", "5"});

  Tokens first_two;
  ember::imdb::for_each_token(review, [&](std::string_view token) {
    first_two.emplace_back(token);
    return first_two.size() < 2;
  });
  CHECK(first_two == Tokens{"one", "two"});
}
