// The CPU's optimiser steps (declared in core/kernels.h): SGD and Adam / AdamW over a list of
// tensors, each tensor in turn, its elements on the thread pool, each updated by the per-element rule
// of core/update_rules.h, the very function the GPU's fused kernels (cuda/optim_kernels.cu) call.
// Determinism: each element is updated on its own (no sums), so the result is the same for any thread
// count, and the same as the GPU's. Built with -fno-math-errno (CMakeLists.txt), so that the Adam
// loop's square roots vectorise.
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "core/update_rules.h"

namespace ember::cpu {
namespace {

// Runs fn(t, T* param, const T* grad, begin, end) over the elements of each tensor t of the list in
// turn, on the thread pool.
template <typename Fn>
void update_each(const On& on, const TensorList& tensors, const char* op, Fn fn) {
  dispatch_floating(Dtype(on.dtype), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int t = 0; t < tensors.count; ++t) {
      T* p = static_cast<T*>(tensors.params[t]);
      const T* g = static_cast<const T*>(tensors.grads[t]);
      parallel_for(0, tensors.sizes[t], 1 << 15, [&](int64_t begin, int64_t end) { fn(t, p, g, begin, end); });
    }
  });
}

}  // namespace

void sgd_step(const On& on, const TensorList& tensors, const SgdHyper& hyper) {
  update_each(on, tensors, "SGD", [&](int t, auto* p, const auto* g, int64_t begin, int64_t end) {
    using T = std::remove_pointer_t<decltype(p)>;
    const SgdRule<T> rule{T(hyper.lr), T(hyper.momentum), hyper.first_step};
    T* v = tensors.state1 != nullptr ? static_cast<T*>(tensors.state1[t]) : nullptr;
    const double wd = tensors.weight_decays[t];
    for (int64_t j = begin; j < end; ++j) rule(p[j], g[j], v != nullptr ? v + j : nullptr, wd);
  });
}

void adam_step(const On& on, const TensorList& tensors, const AdamHyper& hyper, const AdamHyper* device_hyper) {
  const AdamHyper& h = device_hyper != nullptr ? *device_hyper : hyper;  // on the CPU, host memory
  update_each(on, tensors, h.decoupled ? "AdamW" : "Adam", [&](int t, auto* p, const auto* g, int64_t begin,
                                                                 int64_t end) {
    using T = std::remove_pointer_t<decltype(p)>;
    const AdamRule<T> rule(h.lr, h.beta1, h.beta2, h.eps, h.correction1, h.correction2, h.decoupled);
    T* m = static_cast<T*>(tensors.state1[t]);
    T* v = static_cast<T*>(tensors.state2[t]);
    const double wd = tensors.weight_decays[t];
    for (int64_t j = begin; j < end; ++j) rule(p[j], g[j], m[j], v[j], wd);
  });
}

}  // namespace ember::cpu
