// What a checkpoint's forward keeps for its recompute (selective recomputation, as PyTorch's
// selective activation checkpointing): an op whose results are small but dear to compute keeps them
// during a checkpoint's no-grad forward, and the recompute in backward takes them back instead of
// computing them again. Attention takes part (autograd/ops/attention.cpp, with or without a band):
// it keeps its output [B, T, D] and its rows' softmax statistics [B, H, T, 2], a few MiB, where
// computing them again costs its max and sum passes and P V over [B, H, T, T] scores (over a band, the kernel
// whose backward needs nothing else, skips its forward altogether).
//
// An op that takes part wraps its forward:
//
//   KeptResults r = kept_or_computed("window_attention", out_shape, out_dtype, /*reuse=*/true, [&] {
//     ...compute out and lse...
//     return KeptResults{out, lse};
//   });
//
// which in a recompute returns what the forward's same call kept, and otherwise computes (keeping the
// results when a checkpoint's forward runs).
//
// Each checkpoint (autograd/checkpoint.cpp) owns one RecomputeCache. Its forward makes it the cache ops
// keep into (a checkpoint nested in it keeps into both); its first recompute replays it: the n-th call of
// kept_or_computed gets what the forward's n-th call kept. So the recompute must call those ops
// in the forward's order (checkpoint's own rule: fn computes the same thing twice); an op in another's
// place is an error. A second recompute (backward with retain_graph) finds nothing kept and computes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

using KeptResults = std::vector<Tensor>;

class RecomputeCache {
 public:
  void keep(const char* op, KeptResults results) { entries_.push_back({op, std::move(results)}); }
  // The next kept results in call order (moved out), or nothing when all are taken.
  std::optional<KeptResults> take(const char* op);
  bool replayed() const { return replayed_; }
  void mark_replayed() { replayed_ = true; }

 private:
  struct Entry {
    std::string op;
    KeptResults results;
  };
  std::vector<Entry> entries_;
  size_t next_ = 0;
  bool replayed_ = false;
};

// For a scope on this thread, what the ops keep also goes into `cache` (a checkpoint's forward).
class KeepResultsScope {
 public:
  explicit KeepResultsScope(RecomputeCache* cache);
  ~KeepResultsScope();
  KeepResultsScope(const KeepResultsScope&) = delete;
  KeepResultsScope& operator=(const KeepResultsScope&) = delete;
};

// For a scope on this thread, kept_or_computed takes from `cache` (a checkpoint's recompute; null: from
// nothing), and no result is kept for an outer checkpoint.
class ReplayResultsScope {
 public:
  explicit ReplayResultsScope(RecomputeCache* cache);
  ~ReplayResultsScope();
  ReplayResultsScope(const ReplayResultsScope&) = delete;
  ReplayResultsScope& operator=(const ReplayResultsScope&) = delete;

 private:
  RecomputeCache* previous_;
  std::vector<RecomputeCache*> kept_into_;
};

// For the ops:
// In a checkpoint's recompute, the results its forward kept at this call (the first, the output, checked to
// be of `out_shape` and `out_dtype`, and a fresh handle); else compute(). Either way they are kept for any
// checkpoint whose forward runs. reuse = false: compute even in a recompute (the caller needs more than was
// kept; the call still takes its turn). taken (when not null): whether the results are the kept ones.
KeptResults kept_or_computed(const char* op, const Shape& out_shape, Dtype out_dtype, bool reuse,
                             const std::function<KeptResults()>& compute, bool* taken = nullptr);
bool keeping_results();        // a checkpoint's forward is running (compute() may keep extra statistics)
int64_t kept_results_taken();  // how many times an op took kept results on this thread (for tests)

}  // namespace ember
