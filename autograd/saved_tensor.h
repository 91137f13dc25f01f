// SavedTensor: a tensor kept for a backward formula, with the version its storage had when it was saved.
//
// Every in-place write (copy_, fill_, add_, mul_, uniform_, the optimisers' updates, ...) bumps the
// version of the storage it writes (Storage::bump_version). An op saves what its backward reads with
// save(t), and the backward reads it back with get(), which compares the two versions: a tensor changed
// in place between forward and backward is an ember::Error naming the op, not a silently wrong gradient.
//   record("mul", y, {a, b}, [a = save(a), b = save(b)](const Tensor& g) -> Grads {
//     return {g * b.get(), g * a.get()};
//   });
// Cost: an integer per saved tensor and a compare per read; nothing per element.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember {

class SavedTensor {
 public:
  SavedTensor() = default;  // nothing saved: get() returns an undefined tensor
  explicit SavedTensor(const Tensor& tensor);

  // The tensor; an ember::Error naming the op whose backward runs if its storage was written since.
  const Tensor& get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;  // NOTE: detached: an op that saves its output must not make the output's node own it (a cycle)
  uint64_t version_ = 0;
};

inline SavedTensor save(const Tensor& tensor) { return SavedTensor(tensor); }

}  // namespace ember
