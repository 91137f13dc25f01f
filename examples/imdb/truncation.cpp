// Cutting long reviews (head, tail, head+tail) and the --attention setting's text form.
#include "examples/imdb/truncation.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "examples/imdb/settings.h"
#include "examples/imdb/vocabulary.h"

namespace ember::imdb {

bool is_truncation(const std::string& mode) { return mode == "head" || mode == "tail" || mode == "head+tail"; }

std::vector<int32_t> encode_truncated(const Vocabulary& vocabulary, std::string_view review, int64_t max_len,
                                      const std::string& mode) {
  if (mode == "head") return vocabulary.encode(review, max_len);  // stops tokenizing at max_len
  std::vector<int32_t> ids = vocabulary.encode(review, std::numeric_limits<int64_t>::max());
  if (int64_t(ids.size()) <= max_len) return ids;
  const int64_t head = mode == "tail" ? 0 : max_len / 4, tail = max_len - head;
  std::vector<int32_t> kept(ids.begin(), ids.begin() + head);
  kept.insert(kept.end(), ids.end() - tail, ids.end());
  return kept;
}

}  // namespace ember::imdb
