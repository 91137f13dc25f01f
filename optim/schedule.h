// Learning-rate schedules and gradient clipping.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::optim {

enum class ScheduleKind { Constant, WarmupLinear, WarmupCosine };

// The learning rate at `step` (0-based) of `total_steps`:
//   Constant:     base_lr
//   WarmupLinear: base_lr * step/warmup while warming up (0 at step 0), then linear decay to 0 at total_steps
//   WarmupCosine: the same warm-up, then base_lr * (1 + cos(pi * progress)) / 2
struct Schedule {
  ScheduleKind kind = ScheduleKind::Constant;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double lr_at(int64_t step) const;
};
ScheduleKind parse_schedule(const std::string& name);  // "constant", "linear", "cosine"

// Scales all gradients in place so that their global L2 norm is at most max_norm.
// Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same without reading the norm back: it is returned as a float64 scalar on the gradients'
// device, where (on one GPU) the norm and the scaling are computed: the host does not wait.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace ember::optim
