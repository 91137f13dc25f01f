// The optimisers' updates as ops (in place, outside autograd), so that optim/ reaches every device
// through autograd/ops.h: the inputs are checked once here, then the parameters of each device and dtype
// go to one kernel of core/kernels.h (kernel::sgd_step, kernel::adam_step: on the CPU one pass per
// parameter on the thread pool, on a GPU one fused launch), which apply the per-element rules of
// core/update_rules.h. Gradient clipping's sum of squares and scaling likewise.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "autograd/ops/op_support.h"
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

// The indices of the tensors by where their kernel runs (device, dtype), each group in order: one
// kernel call each (on a GPU, one fused launch per 32 tensors).
std::map<std::pair<int, int>, std::vector<size_t>> kernel_groups(const std::vector<Tensor>& tensors) {
  std::map<std::pair<int, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const On on = kernel_on(tensors[i]);
    groups[{on.device, on.dtype}].push_back(i);
  }
  return groups;
}

// The raw pointers of one group's tensors for a multi-tensor kernel (TensorList, core/kernels.h).
// list() points into these vectors: the TensorPointers must outlive the kernel call that uses it.
struct TensorPointers {
  std::vector<void*> params, state1, state2;
  std::vector<const void*> grads;
  std::vector<int64_t> sizes;
  std::vector<double> weight_decays;
  TensorList list() const {
    return {int(sizes.size()),
            params.empty() ? nullptr : params.data(),
            grads.empty() ? nullptr : grads.data(),
            state1.empty() ? nullptr : state1.data(),
            state2.empty() ? nullptr : state2.data(),
            sizes.data(),
            weight_decays.empty() ? nullptr : weight_decays.data()};
  }
};

// The tensors [i] for i in `group` of each list given (an empty list, or one undefined, gives no array):
// the parameters written, the gradients read, up to two state buffers, and the weight decays.
TensorPointers tensor_pointers(const std::vector<size_t>& group, const std::vector<Tensor>& params,
                               const std::vector<Tensor>& grads, const std::vector<Tensor>& state1 = {},
                               const std::vector<Tensor>& state2 = {}, const std::vector<double>& weight_decays = {}) {
  TensorPointers out;
  for (size_t i : group) {
    if (!params.empty()) out.params.push_back(params[i].raw_data());
    if (!grads.empty()) out.grads.push_back(grads[i].raw_data());
    if (!state1.empty()) out.state1.push_back(state1[i].raw_data());
    if (!state2.empty()) out.state2.push_back(state2[i].raw_data());
    if (!weight_decays.empty()) out.weight_decays.push_back(weight_decays[i]);
    out.sizes.push_back((params.empty() ? grads : params)[i].numel());
  }
  return out;
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
  for (const auto& [where, group] : kernel_groups(params)) {
    const TensorPointers pointers = tensor_pointers(group, params, grads, velocities, {}, weight_decays);
    kernel::sgd_step(On{where.first, where.second}, pointers.list(), hyper);
  }
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
  // The step's numbers on the device serve the parameters of that GPU; the CPU's read `hyper`.
  const int hyper_device = device_hyper.defined() ? kernel_on(device_hyper).device : -1;
  for (const auto& [where, group] : kernel_groups(params)) {
    const On on{where.first, where.second};
    const bool on_device = device_hyper.defined() && on.device == hyper_device;
    EMBER_CHECK(!device_hyper.defined() || on.cpu() || on_device, "{}: the step's numbers are on {}, a parameter on {}",
                op, device_hyper.device().str(), Device::cuda(on.device).str());
    const TensorPointers pointers = tensor_pointers(group, params, grads, exp_avg, exp_avg_sq, weight_decays);
    kernel::adam_step(on, pointers.list(), hyper,
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
  // The tensors of each device and dtype in one kernel call (on a GPU one launch and one read back),
  // its partial sums added up in order; then the groups' sums in order.
  double total = 0;
  for (const auto& [where, group] : kernel_groups(tensors)) {
    const On on{where.first, where.second};
    const TensorPointers pointers = tensor_pointers(group, {}, tensors);  // read as the kernel's grads
    const TensorList list = pointers.list();
    Tensor partials = Tensor::empty({kernel::sum_squares_partials(on, list)}, Dtype::Float64, tensors[group[0]].device());
    if (partials.numel() == 0) continue;
    kernel::sum_squares(on, list, partials.data<double>());
    double sum = 0;
    for (double partial : partials.to(Device::cpu()).to_vector<double>()) sum += partial;  // in order
    total += sum;
  }
  return total;
}

Tensor clip_by_norm_(const std::vector<Tensor>& tensors, double max_norm) {
  // All on one device, of one dtype, contiguous: the norm and the factor stay there (nothing read
  // back from a GPU): the sum of squares, the factor, the scaling by it.
  bool one_group = !tensors.empty();
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "clip_by_norm_: a tensor is undefined");
    EMBER_CHECK(is_floating(t.dtype()), "clip_by_norm_: expected floating tensors, got {}", dtype_name(t.dtype()));
    one_group = one_group && t.device() == tensors[0].device() && t.dtype() == tensors[0].dtype() && t.is_contiguous();
  }
  if (one_group) {
    for (const Tensor& t : tensors) t.bump_version();  // written in place by the scaling
    const On on = kernel_on(tensors[0]);
    const Device device = tensors[0].device();
    std::vector<size_t> all(tensors.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const TensorPointers read = tensor_pointers(all, {}, tensors), written = tensor_pointers(all, tensors, {});
    const int64_t count = kernel::sum_squares_partials(on, read.list());
    Tensor partials = Tensor::empty({count > 0 ? count : 1}, Dtype::Float64, device);
    if (count > 0) kernel::sum_squares(on, read.list(), partials.data<double>());
    Tensor norm_scale = Tensor::empty({2}, Dtype::Float64, device);
    kernel::clip_scale(on, partials.data<double>(), count, max_norm, norm_scale.data<double>());
    kernel::scale_all_by(on, written.list(), norm_scale.data<double>() + 1);
    return norm_scale.select(0, 0);
  }
  const double norm = std::sqrt(sum_of_squares(tensors));
  if (norm > max_norm && norm > 0) scale_all_(tensors, max_norm / (norm + 1e-6));
  return from_vector(std::vector<double>{norm}, {});
}

void scale_all_(const std::vector<Tensor>& tensors, double value) {
  // Contiguous float32 / float64 tensors: each device and dtype's in one kernel call (on a GPU one
  // launch); any other (strided, bfloat16) through mul_.
  std::vector<Tensor> listed;
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "scale_all_: a tensor is undefined");
    if (is_floating(t.dtype()) && t.is_contiguous()) {
      t.bump_version();  // written in place by the kernel below, as mul_ does
      listed.push_back(t);
    } else {
      Tensor(t).mul_(value);
    }
  }
  for (const auto& [where, group] : kernel_groups(listed))
    kernel::scale_all(On{where.first, where.second}, tensor_pointers(group, listed, {}).list(), value);
}

}  // namespace ember
