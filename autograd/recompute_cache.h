// What a checkpoint's forward keeps for its recompute (selective recomputation, as PyTorch's
// selective activation checkpointing): an op whose results are small but dear to compute keeps them
// during a checkpoint's no-grad forward, and the recompute in backward takes them back instead of
// computing them again. Attention takes part (core/ops/attention.cpp, core/ops/window_attention.cpp):
// it keeps its output [B, T, D] and its rows' softmax statistics [B, H, T, 2], a few MiB, where
// computing them again costs its max and sum passes and P V over [B, H, T, T] scores (the window kernel,
// whose backward needs nothing else, skips its forward altogether).
//
// An op that takes part:
//
//   if (std::optional<KeptResults> kept = take_kept_results("attention")) { ...use *kept... }
//   else { ...compute... }
//   if (keeping_results()) keep_results("attention", {out, stats});
//
// Each checkpoint (autograd/checkpoint.cpp) owns one RecomputeCache. Its forward makes it the cache ops
// keep into (a checkpoint nested in it keeps into both); its first recompute replays it: the n-th call of
// take_kept_results gets what the forward's n-th keep_results kept. So the recompute must call those ops
// in the forward's order (checkpoint's own rule: fn computes the same thing twice); an op in another's
// place is an error. A second recompute (backward with retain_graph) finds nothing kept and computes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
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
  int64_t size() const { return int64_t(entries_.size()); }

 private:
  struct Entry {
    std::string op;
    KeptResults results;
  };
  std::vector<Entry> entries_;
  size_t next_ = 0;
  bool replayed_ = false;
};

// For a scope on this thread, the ops' keep_results also go into `cache` (a checkpoint's forward).
class KeepResultsScope {
 public:
  explicit KeepResultsScope(RecomputeCache* cache);
  ~KeepResultsScope();
  KeepResultsScope(const KeepResultsScope&) = delete;
  KeepResultsScope& operator=(const KeepResultsScope&) = delete;
};

// For a scope on this thread, take_kept_results takes from `cache` (a checkpoint's recompute; null: from
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
bool keeping_results();                                        // a checkpoint's forward is running
void keep_results(const char* op, const KeptResults& results);  // into every checkpoint whose forward runs
std::optional<KeptResults> take_kept_results(const char* op);  // in a recompute: the forward's, or nothing
int64_t kept_results_taken();  // how many times an op took kept results on this thread (for tests)
// That the results taken are this call's: two tensors, the first (the output) of `out_shape` and
// `out_dtype`; else the error of a recompute that computes something else.
void check_kept_results(const char* op, const KeptResults& kept, const Shape& out_shape, Dtype out_dtype);

}  // namespace ember
