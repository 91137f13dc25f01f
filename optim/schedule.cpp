// Learning-rate schedules and global-norm gradient clipping.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace ember::optim {

double Schedule::lr_at(int64_t step) const {
  if (kind == ScheduleKind::Constant) return base_lr;
  if (step < warmup_steps) return base_lr * double(step) / double(warmup_steps);
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  if (kind == ScheduleKind::WarmupLinear) return base_lr * (1.0 - progress);
  return base_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::Constant;
  if (name == "linear") return ScheduleKind::WarmupLinear;
  if (name == "cosine") return ScheduleKind::WarmupCosine;
  fail("unknown schedule '{}': expected constant, linear or cosine", name);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return clip_by_norm_(grads, max_norm);  // on one GPU: the norm, the factor and the scaling stay there
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // One read of each gradient, squares summed in double: no temporaries in the training step. On a
  // GPU all the gradients of a device and dtype go to one launch, and so does their scaling
  // (autograd/ops/optimizer_steps.cpp).
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  double norm = std::sqrt(sum_of_squares(grads));
  if (norm > max_norm && norm > 0) scale_all_(grads, max_norm / (norm + 1e-6));
  return norm;
}

}  // namespace ember::optim
