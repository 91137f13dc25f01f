// How a review longer than --max-len is cut: its head (the recipe), its tail, or both ends (Sun et al.,
// "How to Fine-Tune BERT for Text Classification", 2019: the first quarter and the last three quarters
// of the budget, where reviews put their verdict).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::imdb {

class Vocabulary;

// "head", "tail" or "head+tail".
bool is_truncation(const std::string& mode);

// The review's token ids, at most max_len of them, cut as `mode` says: head = the first max_len;
// tail = the last max_len; head+tail = the first max_len / 4 then the last max_len - max_len / 4.
std::vector<int32_t> encode_truncated(const Vocabulary& vocabulary, std::string_view review, int64_t max_len,
                                      const std::string& mode);

}  // namespace ember::imdb
