// tokenize(): collects for_each_token's tokens into a vector of strings.
#include <string>
#include <string_view>
#include <vector>

#include "examples/imdb/tokenizer.h"

namespace ember::imdb {

std::vector<std::string> tokenize(std::string_view review) {
  std::vector<std::string> tokens;
  for_each_token(review, [&](std::string_view token) {
    tokens.emplace_back(token);
    return true;
  });
  return tokens;
}

}  // namespace ember::imdb
