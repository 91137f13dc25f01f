// Optimisers. Each step is one pass over each parameter's memory (a fused update, no temporaries).
#include "optim/optimizer.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "optim/update_rules.h"

namespace ember::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  EMBER_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got {}", lr);
  for (auto& group : groups_)
    for (auto& p : group.params) {
      EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "optimizer: parameters must be leaves that require grad");
      EMBER_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous");
    }
}

bool Optimizer::on_cuda() const {
  for (const auto& group : groups_)
    for (const auto& p : group.params) return p.device().is_cuda();
  return false;
}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group.params) p.zero_grad();
}

Tensor& Optimizer::buffer(const std::string& kind, size_t index, const Tensor& like) {
  auto [it, inserted] = buffers_.try_emplace(std::to_string(index) + "." + kind);
  if (inserted) it->second = zeros_like(like);
  return it->second;
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out = buffers_;
  out["step"] = from_vector(std::vector<int64_t>{steps_});
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto step = state.find("step");
  EMBER_CHECK(step != state.end() && step->second.numel() == 1 && step->second.dtype() == Dtype::Int64,
              "optimizer state: 'step' is missing or malformed");
  std::vector<Tensor> params;
  for (auto& group : groups_)
    for (auto& p : group.params) params.push_back(p);
  for (auto& [name, t] : state) {
    if (name == "step") continue;
    size_t dot = name.find('.');
    EMBER_CHECK(dot != std::string::npos, "optimizer state: unexpected entry '{}'", name);
    size_t index = std::stoul(name.substr(0, dot));
    EMBER_CHECK(index < params.size(), "optimizer state: '{}' refers to parameter {} of {}", name, index, params.size());
    EMBER_CHECK(t.shape() == params[index].shape() && t.dtype() == params[index].dtype(),
                "optimizer state: '{}' has shape {}, parameter {} has {}", name, shape_str(t.shape()), index,
                shape_str(params[index].shape()));
  }
  buffers_.clear();
  for (auto& [name, t] : state)  // each buffer on its parameter's device (a checkpoint is read to the CPU)
    if (name != "step") buffers_[name] = t.to(params[std::stoul(name.substr(0, name.find('.')))].device()).clone();
  steps_ = step->second.item<int64_t>();
}

namespace {

// Runs fn(T* param, const T* grad, begin, end) over a parameter's elements on the thread pool.
template <typename Fn>
void update_elements(const Tensor& p, const Tensor& grad, const char* op, Fn fn) {
  check_cpu(op, p);
  EMBER_CHECK(grad.shape() == p.shape(), "{}: gradient shape {} differs from parameter {}", op, shape_str(grad.shape()),
              shape_str(p.shape()));
  Tensor g = grad.contiguous();
  p.bump_version();  // an in-place write: a graph that saved p sees the change (autograd/saved_tensor.h)
  dispatch_floating(p.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pd = p.data<T>();
    const T* gd = g.data<T>();
    parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) { fn(pd, gd, begin, end); });
  });
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum) : Optimizer(std::move(groups), lr), momentum(momentum) {
  EMBER_CHECK(momentum >= 0, "SGD: momentum must be >= 0, got {}", momentum);
}

void SGD::step() {
  NoGradGuard no_grad;
  ++steps_;
  const bool first = steps_ == 1;
  if (on_cuda()) {
    // On a GPU: every parameter in one fused multi-tensor launch (the same rule, element by element).
    std::vector<Tensor> params, grads, velocities;
    std::vector<double> decays;
    for_each_param([&](size_t index, Tensor& p, double wd) {
      if (!p.grad().defined()) return;
      p.bump_version();  // updated in place by the launch below
      params.push_back(p);
      grads.push_back(p.grad().contiguous());
      if (momentum != 0) velocities.push_back(buffer("momentum", index, p));
      decays.push_back(wd);
    });
    gpu::sgd_step(params, grads, velocities, decays, {lr_, momentum, first});
    return;
  }
  for_each_param([&](size_t index, Tensor& p, double wd) {
    if (!p.grad().defined()) return;
    Tensor velocity = momentum != 0 ? buffer("momentum", index, p) : Tensor();
    update_elements(p, p.grad(), "SGD", [&](auto* pd, const auto* gd, int64_t b, int64_t e) {
      using T = std::remove_pointer_t<decltype(pd)>;
      const SgdRule<T> rule{T(lr_), T(momentum), first};
      T* v = velocity.defined() ? velocity.data<T>() : nullptr;
      for (int64_t i = b; i < e; ++i) rule(pd[i], gd[i], v != nullptr ? v + i : nullptr, wd);
    });
  });
}

Adam::Adam(std::vector<ParamGroup> groups, double lr, double beta1, double beta2, double eps, bool decoupled)
    : Optimizer(std::move(groups), lr), beta1(beta1), beta2(beta2), eps(eps), decoupled(decoupled) {
  EMBER_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "Adam: betas must be in [0, 1), got ({}, {})", beta1,
              beta2);
}

void Adam::step() {
  NoGradGuard no_grad;
  ++steps_;
  const double correction1 = 1 - std::pow(beta1, double(steps_));
  const double correction2 = 1 - std::pow(beta2, double(steps_));
  if (on_cuda()) {
    // On a GPU: every parameter in one fused multi-tensor launch (the same rule, element by element).
    std::vector<Tensor> params, grads, ms, vs;
    std::vector<double> decays;
    for_each_param([&](size_t index, Tensor& p, double wd) {
      if (!p.grad().defined()) return;
      p.bump_version();  // updated in place by the launch below
      params.push_back(p);
      grads.push_back(p.grad().contiguous());
      ms.push_back(buffer("exp_avg", index, p));
      vs.push_back(buffer("exp_avg_sq", index, p));
      decays.push_back(wd);
    });
    gpu::adam_step(params, grads, ms, vs, decays, {lr_, beta1, beta2, eps, correction1, correction2, decoupled});
    return;
  }
  for_each_param([&](size_t index, Tensor& p, double wd) {
    if (!p.grad().defined()) return;
    Tensor m = buffer("exp_avg", index, p), v = buffer("exp_avg_sq", index, p);
    update_elements(p, p.grad(), decoupled ? "AdamW" : "Adam", [&](auto* pd, const auto* gd, int64_t b, int64_t e) {
      using T = std::remove_pointer_t<decltype(pd)>;
      const AdamRule<T> rule(lr_, beta1, beta2, eps, correction1, correction2, decoupled);
      T* md = m.data<T>();
      T* vd = v.data<T>();
      for (int64_t i = b; i < e; ++i) rule(pd[i], gd[i], md[i], vd[i], wd);
    });
  });
}

}  // namespace ember::optim
