// What a checkpoint's forward keeps for its recompute (autograd/recompute_cache.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/recompute_cache.h"

#include "core/error.h"

namespace ember {
namespace {

thread_local std::vector<RecomputeCache*> keeping;  // the caches of the checkpoints whose forward runs
thread_local RecomputeCache* replaying = nullptr;    // the cache of the recompute that runs
thread_local int64_t taken = 0;

}  // namespace

std::optional<KeptResults> RecomputeCache::take(const char* op) {
  if (next_ >= entries_.size()) return std::nullopt;
  Entry& entry = entries_[next_++];
  EMBER_CHECK(entry.op == op,
              "checkpoint: the recompute called {} where the forward called {} (call {} of those that keep results); "
              "the function must compute the same thing twice", op, entry.op, next_);
  return std::move(entry.results);
}

KeepResultsScope::KeepResultsScope(RecomputeCache* cache) { keeping.push_back(cache); }
KeepResultsScope::~KeepResultsScope() { keeping.pop_back(); }

ReplayResultsScope::ReplayResultsScope(RecomputeCache* cache) : previous_(replaying), kept_into_(std::move(keeping)) {
  keeping.clear();
  replaying = cache;
  if (cache != nullptr) cache->mark_replayed();
}
ReplayResultsScope::~ReplayResultsScope() {
  replaying = previous_;
  keeping = std::move(kept_into_);
}

bool keeping_results() { return !keeping.empty(); }

int64_t kept_results_taken() { return taken; }

KeptResults kept_or_computed(const char* op, const Shape& out_shape, Dtype out_dtype, bool reuse,
                             const std::function<KeptResults()>& compute, bool* taken_here) {
  std::optional<KeptResults> kept = replaying != nullptr ? replaying->take(op) : std::nullopt;  // this call's turn
  const bool from_forward = kept.has_value() && reuse;
  if (from_forward) {
    const bool fits = kept->size() == 2 && (*kept)[0].defined() && (*kept)[0].shape() == out_shape &&
                      (*kept)[0].dtype() == out_dtype;
    EMBER_CHECK(fits, "checkpoint: the recompute's {} makes {} {}, but its forward kept {}; the function must compute "
                "the same thing twice", op, dtype_name(out_dtype), shape_str(out_shape),
                kept->empty() || !(*kept)[0].defined()
                    ? std::string("nothing")
                    : fmt::format("{} {}", dtype_name((*kept)[0].dtype()), shape_str((*kept)[0].shape())));
    ++taken;
  } else {
    kept = compute();
  }
  for (RecomputeCache* cache : keeping) cache->keep(op, *kept);
  if (taken_here != nullptr) *taken_here = from_forward;
  // NOTE: a fresh handle for a kept output: the op records its node on it, and a checkpoint nested in
  // this recompute may have kept the same tensor for its own.
  if (from_forward) (*kept)[0] = (*kept)[0].detach();
  return std::move(*kept);
}

}  // namespace ember
