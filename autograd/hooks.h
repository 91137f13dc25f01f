// Gradient-ready hooks: a callback per leaf that backward() calls once the leaf's .grad holds
// everything that pass sends it, while the rest of the graph is still being walked. Data
// parallelism (nn/data_parallel.h) starts sending a bucket of gradients from them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace ember {

using GradReadyHook = std::function<void(const Tensor& leaf)>;

// Removes its hook when destroyed (or on remove()).
class GradHookHandle {
 public:
  GradHookHandle() = default;
  explicit GradHookHandle(uint64_t id) : id_(id) {}
  GradHookHandle(GradHookHandle&& other) noexcept : id_(other.id_) { other.id_ = 0; }
  GradHookHandle& operator=(GradHookHandle&& other) noexcept;
  ~GradHookHandle() { remove(); }
  void remove();

 private:
  uint64_t id_ = 0;  // 0: no hook
};

// Calls hook(leaf) on the thread running backward(), once per backward() pass that reaches
// `leaf` (a tensor that requires grad and was made by no op): right after the last gradient that
// pass sends it has been added to leaf.grad() (left undefined when none of them was defined).
// NOTE: the rest of the pass does not touch leaf.grad() again, so the hook may hand it to
// another thread; the pass itself goes on when the hook returns.
GradHookHandle on_grad_ready(const Tensor& leaf, GradReadyHook hook);

namespace detail {
// For the engine (autograd/engine.cpp): whether any hook is registered; the hooks of a leaf.
bool any_grad_hooks();
bool has_grad_hooks(const TensorImpl* leaf);
void run_grad_hooks(const std::shared_ptr<TensorImpl>& leaf);
}  // namespace detail

}  // namespace ember
