// Learning-rate schedules and global-norm gradient clipping.
#include "optim/schedule.h"

#include <cmath>
#include <map>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/ops.h"

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

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // One read of each gradient, squares summed in double: no temporaries in the training step.
  // On a GPU all the gradients of a device and dtype go to one launch (and one read back of its
  // partial sums), and so does their scaling: not a few launches and a wait per parameter.
  std::map<std::pair<int, int>, std::vector<Tensor>> on_gpu;  // by (device index, dtype)
  double total = 0;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad().contiguous();
    if (g.device().is_cuda()) {
      on_gpu[{g.device().index, int(g.dtype())}].push_back(g);
      continue;
    }
    check_cpu("clip_grad_norm", g);
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* d = g.data<T>();
      const int64_t n = g.numel();
      // Independent accumulators so that the loop vectorises; combined in a fixed order, so the
      // norm is the same on every run.
      constexpr int kLanes = 16;
      double lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lanes[k] += double(d[i + k]) * double(d[i + k]);
      for (; i < n; ++i) lanes[0] += double(d[i]) * double(d[i]);
      for (double lane : lanes) total += lane;
    });
  }
  for (const auto& [where, grads] : on_gpu) total += gpu::sum_of_squares(grads);
  double norm = std::sqrt(total);
  if (norm > max_norm && norm > 0) {
    double scale = max_norm / (norm + 1e-6);
    std::map<std::pair<int, int>, std::vector<Tensor>> gpu_grads;
    for (const Tensor& p : params) {
      if (!p.grad().defined()) continue;
      if (p.grad().device().is_cuda() && p.grad().is_contiguous()) {
        p.grad().bump_version();  // written in place below, like mul_ does
        gpu_grads[{p.grad().device().index, int(p.grad().dtype())}].push_back(p.grad());
      } else
        p.grad().mul_(scale);
    }
    for (const auto& [where, grads] : gpu_grads) gpu::scale_all(grads, scale);
  }
  return norm;
}

}  // namespace ember::optim
