// The optimisers' updates as ops (in place, outside autograd), so that optim/ reaches every device
// through core/ops.h: the inputs are checked once here, then each parameter is updated by one pass
// on the CPU (the per-element rules of core/update_rules.h, on the thread pool), or all the
// parameters of a GPU and dtype by one fused launch of the same rules (core/gpu.h,
// cuda/optim_kernels.cu). Gradient clipping's sum of squares and scaling likewise.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/ops/op_support.h"
#include "core/update_rules.h"

namespace ember {
namespace {

// Every parameter has a gradient and a weight decay, and each of `states` (when not empty) one
// tensor per parameter; each is on its parameter's device, of its dtype and shape, and the
// parameters and the state are contiguous (the optimiser made them so).
void check_step(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<const std::vector<Tensor>*>& states, const std::vector<double>& weight_decays) {
  EMBER_CHECK(grads.size() == params.size() && weight_decays.size() == params.size(),
              "{}: {} parameters but {} gradients and {} weight decays", op, params.size(), grads.size(),
              weight_decays.size());
  for (const auto* state : states)
    EMBER_CHECK(state->empty() || state->size() == params.size(), "{}: {} parameters but {} state buffers", op,
                params.size(), state->size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    EMBER_CHECK(p.defined(), "{}: parameter {} is undefined", op, i);
    EMBER_CHECK(is_floating(p.dtype()), "{}: parameter {} is {}, not floating", op, i, dtype_name(p.dtype()));
    std::vector<const Tensor*> all{&grads[i]};
    for (const auto* state : states)
      if (!state->empty()) all.push_back(&(*state)[i]);
    for (const Tensor* t : all) {
      EMBER_CHECK(t->defined(), "{}: the gradient or state of parameter {} is undefined", op, i);
      EMBER_CHECK(t->device() == p.device(), "{}: parameter {} is on {}, its gradient or state on {}", op, i,
                  p.device().str(), t->device().str());
      EMBER_CHECK(t->dtype() == p.dtype(), "{}: parameter {} is {}, its gradient or state {}", op, i,
                  dtype_name(p.dtype()), dtype_name(t->dtype()));
      EMBER_CHECK(t->shape() == p.shape(), "{}: parameter {} has shape {}, its gradient or state {}", op, i,
                  shape_str(p.shape()), shape_str(t->shape()));
    }
    EMBER_CHECK(p.is_contiguous(), "{}: parameter {} must be contiguous", op, i);
    for (size_t k = 1; k < all.size(); ++k)
      EMBER_CHECK(all[k]->is_contiguous(), "{}: the state of parameter {} must be contiguous", op, i);
  }
}

// The indices of the CUDA tensors by (device, dtype), each group in order: one fused launch each.
std::map<std::pair<int, int>, std::vector<size_t>> cuda_groups(const std::vector<Tensor>& tensors) {
  std::map<std::pair<int, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].device().is_cuda()) groups[{tensors[i].device().index, int(tensors[i].dtype())}].push_back(i);
  return groups;
}

std::vector<Tensor> pick(const std::vector<Tensor>& tensors, const std::vector<size_t>& indices) {
  std::vector<Tensor> out;
  if (tensors.empty()) return out;
  for (size_t i : indices) out.push_back(tensors[i]);
  return out;
}
std::vector<double> pick(const std::vector<double>& values, const std::vector<size_t>& indices) {
  std::vector<double> out;
  for (size_t i : indices) out.push_back(values[i]);
  return out;
}

// Runs fn(T* param, const T* grad, begin, end) over a CPU parameter's elements on the thread pool.
template <typename Fn>
void update_elements(const Tensor& p, const Tensor& g, const char* op, Fn fn) {
  dispatch_floating(p.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pd = p.data<T>();
    const T* gd = g.data<T>();
    parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) { fn(pd, gd, begin, end); });
  });
}

std::vector<Tensor> contiguous_all(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.contiguous());
  return out;
}

}  // namespace

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads_in,
               const std::vector<Tensor>& velocities, const std::vector<double>& weight_decays,
               const SgdHyper& hyper) {
  check_step("SGD", params, grads_in, {&velocities}, weight_decays);
  const std::vector<Tensor> grads = contiguous_all(grads_in);
  for (const Tensor& p : params) p.bump_version();  // written in place: a graph that saved p sees it
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].device().is_cpu()) continue;
    Tensor velocity = velocities.empty() ? Tensor() : velocities[i];
    const double wd = weight_decays[i];
    update_elements(params[i], grads[i], "SGD", [&](auto* pd, const auto* gd, int64_t b, int64_t e) {
      using T = std::remove_pointer_t<decltype(pd)>;
      const SgdRule<T> rule{T(hyper.lr), T(hyper.momentum), hyper.first_step};
      T* v = velocity.defined() ? velocity.data<T>() : nullptr;
      for (int64_t j = b; j < e; ++j) rule(pd[j], gd[j], v != nullptr ? v + j : nullptr, wd);
    });
  }
  for (const auto& [where, group] : cuda_groups(params))
    gpu::sgd_step(pick(params, group), pick(grads, group), pick(velocities, group), pick(weight_decays, group), hyper);
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads_in,
                const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                const std::vector<double>& weight_decays, const AdamHyper& hyper, const Tensor& device_hyper) {
  const char* op = hyper.decoupled ? "AdamW" : "Adam";
  if (device_hyper.defined())
    EMBER_CHECK(device_hyper.device().is_cuda() && device_hyper.dtype() == Dtype::Int64 && device_hyper.is_contiguous() &&
                    device_hyper.numel() * 8 >= int64_t(sizeof(AdamHyper)),
                "{}: the step's numbers on the device must be a contiguous int64 GPU tensor of at least {} bytes, got "
                "{} {} on {}", op, sizeof(AdamHyper), dtype_name(device_hyper.dtype()), shape_str(device_hyper.shape()),
                device_hyper.device().str());
  check_step(op, params, grads_in, {&exp_avg, &exp_avg_sq}, weight_decays);
  EMBER_CHECK(exp_avg.size() == params.size() && exp_avg_sq.size() == params.size(),
              "{}: every parameter needs both moments", op);
  const std::vector<Tensor> grads = contiguous_all(grads_in);
  for (const Tensor& p : params) p.bump_version();  // written in place: a graph that saved p sees it
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].device().is_cpu()) continue;
    const Tensor &m = exp_avg[i], &v = exp_avg_sq[i];
    const double wd = weight_decays[i];
    update_elements(params[i], grads[i], op, [&](auto* pd, const auto* gd, int64_t b, int64_t e) {
      using T = std::remove_pointer_t<decltype(pd)>;
      const AdamRule<T> rule(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.correction1, hyper.correction2,
                             hyper.decoupled);
      T* md = m.data<T>();
      T* vd = v.data<T>();
      for (int64_t j = b; j < e; ++j) rule(pd[j], gd[j], md[j], vd[j], wd);
    });
  }
  for (const auto& [where, group] : cuda_groups(params))
  {
    const bool on_device = device_hyper.defined() && where.first == device_hyper.device().index;
    EMBER_CHECK(!device_hyper.defined() || on_device, "{}: the step's numbers are on {}, a parameter on {}", op,
                device_hyper.device().str(), Device::cuda(where.first).str());
    gpu::adam_step(pick(params, group), pick(grads, group), pick(exp_avg, group), pick(exp_avg_sq, group),
                   pick(weight_decays, group), hyper,
                   on_device ? reinterpret_cast<const AdamHyper*>(device_hyper.data<int64_t>()) : nullptr);
  }
}

double sum_of_squares(const std::vector<Tensor>& tensors_in) {
  std::vector<Tensor> tensors;
  for (const Tensor& t : tensors_in) {
    EMBER_CHECK(t.defined(), "sum_of_squares: a tensor is undefined");
    EMBER_CHECK(is_floating(t.dtype()), "sum_of_squares: expected floating tensors, got {}", dtype_name(t.dtype()));
    tensors.push_back(t.contiguous());
  }
  double total = 0;
  for (const Tensor& t : tensors) {
    if (!t.device().is_cpu()) continue;
    dispatch_floating(t.dtype(), "sum_of_squares", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* d = t.data<T>();
      const int64_t n = t.numel();
      // Independent accumulators so that the loop vectorises; combined in a fixed order, so the
      // sum is the same on every run.
      constexpr int kLanes = 16;
      double lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lanes[k] += double(d[i + k]) * double(d[i + k]);
      for (; i < n; ++i) lanes[0] += double(d[i]) * double(d[i]);
      for (double lane : lanes) total += lane;
    });
  }
  // On a GPU: all the tensors of a device and dtype in one launch and one read back of its partial sums.
  for (const auto& [where, group] : cuda_groups(tensors)) total += gpu::sum_of_squares(pick(tensors, group));
  return total;
}

Tensor clip_by_norm_(const std::vector<Tensor>& tensors, double max_norm) {
  // All on one GPU, of one dtype, contiguous: the norm and the factor stay there (no read back).
  bool one_gpu = !tensors.empty();
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "clip_by_norm_: a tensor is undefined");
    EMBER_CHECK(is_floating(t.dtype()), "clip_by_norm_: expected floating tensors, got {}", dtype_name(t.dtype()));
    one_gpu = one_gpu && t.device().is_cuda() && t.device() == tensors[0].device() &&
              t.dtype() == tensors[0].dtype() && t.is_contiguous();
  }
  if (one_gpu) {
    for (const Tensor& t : tensors) t.bump_version();  // written in place by the scaling launch
    return gpu::clip_by_norm(tensors, max_norm);
  }
  const double norm = std::sqrt(sum_of_squares(tensors));
  if (norm > max_norm && norm > 0) scale_all_(tensors, max_norm / (norm + 1e-6));
  return from_vector(std::vector<double>{norm}, {});
}

void scale_all_(const std::vector<Tensor>& tensors, double value) {
  std::vector<Tensor> contiguous_on_gpu;
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "scale_all_: a tensor is undefined");
    if (t.device().is_cuda() && t.is_contiguous()) {
      t.bump_version();  // written in place by the launch below, as mul_ does
      contiguous_on_gpu.push_back(t);
    } else {
      Tensor(t).mul_(value);
    }
  }
  for (const auto& [where, group] : cuda_groups(contiguous_on_gpu))
    gpu::scale_all(pick(contiguous_on_gpu, group), value);
}

}  // namespace ember
