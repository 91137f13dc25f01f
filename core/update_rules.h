// The optimisers' update of one element, written once for both devices: the CPU loops of
// core/cpu/optimizer_steps.cpp and the GPU's fused multi-tensor kernels (cuda/optim_kernels.cu) call these
// same functions (EMBER_HD: __host__ __device__ under nvcc), so the CPU tests of SGD and Adam check
// the GPU's arithmetic too. The per-step numbers (bias corrections, step size) are computed once in
// double and rounded to the parameter type, the same way on both devices.
#pragma once
#include <cmath>

#include "core/hd.h"

namespace ember {

// The numbers of one step, the same for every parameter (optim/optimizer.cpp computes them).
struct SgdHyper {
  double lr, momentum;
  bool first_step;
};
struct AdamHyper {
  double lr, beta1, beta2, eps, correction1, correction2;  // correction_k = 1 - beta_k^step
  bool decoupled;                                          // AdamW: decay the weights, not the gradient
};

// SGD with optional momentum and L2 weight decay: d = g + wd p; with momentum, v = mu v + d
// (v = d on the first step) and d = v; then p -= lr d.
template <typename T>
struct SgdRule {
  T lr, momentum;
  bool first_step;  // the velocity starts as the first step's d, not mu * 0 + d (the same number, kept explicit)

  EMBER_HD void operator()(T& p, T g, T* velocity, double weight_decay) const {
    T d = g + T(weight_decay) * p;
    if (velocity != nullptr) d = *velocity = first_step ? d : momentum * *velocity + d;
    p -= lr * d;
  }
};

// Adam (weight decay added to the gradient) or AdamW (decoupled: p *= 1 - lr wd), with
// bias-corrected moments: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= lr / c1 * m / (sqrt(v) / sqrt(c2) + eps), where c_k = 1 - b_k^step.
template <typename T>
struct AdamRule {
  double lr;
  T beta1, beta2, step_size, inv_sqrt_c2, eps;
  bool decoupled;

  EMBER_HD AdamRule(double lr, double beta1, double beta2, double eps, double correction1, double correction2,
                    bool decoupled)
      : lr(lr),
        beta1(T(beta1)),
        beta2(T(beta2)),
        step_size(T(lr / correction1)),
        inv_sqrt_c2(T(1.0 / std::sqrt(correction2))),
        eps(T(eps)),
        decoupled(decoupled) {}

  EMBER_HD void operator()(T& p, T g, T& m, T& v, double weight_decay) const {
    if (decoupled) p *= T(1.0 - lr * weight_decay);
    else g += T(weight_decay) * p;
    m = beta1 * m + (T(1) - beta1) * g;
    v = beta2 * v + (T(1) - beta2) * g * g;
    p -= step_size * m / (std::sqrt(v) * inv_sqrt_c2 + eps);
  }
};

}  // namespace ember
