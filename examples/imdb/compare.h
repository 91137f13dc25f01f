// The single- versus multi-head comparison: trains each head count over several seeds and
// writes a Markdown table (mean ± std), skipping runs that already finished.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/imdb/trainer.h"

namespace ember::imdb {

struct CompareConfig {
  TrainConfig base;                     // the recipe; heads and seed are set per run
  std::vector<int64_t> heads{1, 4, 8};
  int64_t seeds = 3;                    // seeds 0 .. seeds-1
  std::string out = "runs/compare";
};

// Returns the Markdown table, also written to out/compare.md.
std::string compare(const CompareConfig& config);

}  // namespace ember::imdb
