// Fuzz target: the tokenizer and the vocabulary file reader.
//  - tokenize(): every token is a non-empty run of [a-z0-9'], and for_each_token gives the same
//    tokens, stopping exactly where asked;
//  - a vocabulary built from the text encodes it to ids in range;
//  - the same bytes as a vocab.txt file either load or raise ember::Error.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "examples/imdb/tokenizer.h"
#include "examples/imdb/vocabulary.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  using namespace ember::imdb;
  std::string_view text = fuzz::as_text(data, size);
  std::vector<std::string> tokens = tokenize(text);
  size_t total = 0;
  for (const std::string& token : tokens) {
    EMBER_FUZZ_ASSERT(!token.empty());
    for (char c : token) EMBER_FUZZ_ASSERT((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\'');
    total += token.size();
  }
  EMBER_FUZZ_ASSERT(total <= size);
  size_t stop = tokens.size() / 2, seen = 0;
  for_each_token(text, [&](std::string_view token) {
    EMBER_FUZZ_ASSERT(seen < tokens.size() && token == tokens[seen]);
    return ++seen <= stop;
  });
  EMBER_FUZZ_ASSERT(seen == std::min(tokens.size(), stop + 1));

  Vocabulary vocabulary = Vocabulary::build_from_texts({std::string(text)}, 8);
  std::vector<int32_t> ids = vocabulary.encode(text, 32);
  EMBER_FUZZ_ASSERT(ids.size() == std::min<size_t>(tokens.size(), 32));
  for (int32_t id : ids) EMBER_FUZZ_ASSERT(id >= 1 && id < vocabulary.size());

  const auto path = fuzz::scratch_dir() / "vocab.txt";
  fuzz::write_bytes(path, text);
  try {
    Vocabulary loaded = Vocabulary::load(path.string());
    EMBER_FUZZ_ASSERT(loaded.size() >= 2 && loaded.token(0) == Vocabulary::pad_token);
    for (int64_t i = 0; i < loaded.size(); ++i) EMBER_FUZZ_ASSERT(loaded.id(loaded.token(int32_t(i))) == i);
  } catch (const Error&) {
  }
  return 0;
}
