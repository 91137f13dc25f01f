// Optimisers: the state and the step's numbers; the update itself is an op of core/ops.h (sgd_step_,
// adam_step_: one pass over each parameter's memory, a fused update, no temporaries), on any device.
#include "optim/optimizer.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/update_rules.h"

namespace ember::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  EMBER_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got {}", lr);
  for (auto& group : groups_)
    for (auto& p : group.params) {
      EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "optimizer: parameters must be leaves that require grad");
      EMBER_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous");
    }
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

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum) : Optimizer(std::move(groups), lr), momentum(momentum) {
  EMBER_CHECK(momentum >= 0, "SGD: momentum must be >= 0, got {}", momentum);
}

void SGD::step() {
  NoGradGuard no_grad;
  ++steps_;
  std::vector<Tensor> params, grads, velocities;
  std::vector<double> decays;
  for_each_param([&](size_t index, Tensor& p, double wd) {
    if (!p.grad().defined()) return;
    params.push_back(p);
    grads.push_back(p.grad());
    if (momentum != 0) velocities.push_back(buffer("momentum", index, p));
    decays.push_back(wd);
  });
  sgd_step_(params, grads, velocities, decays, {lr_, momentum, steps_ == 1});
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
  std::vector<Tensor> params, grads, ms, vs;
  std::vector<double> decays;
  for_each_param([&](size_t index, Tensor& p, double wd) {
    if (!p.grad().defined()) return;
    params.push_back(p);
    grads.push_back(p.grad());
    ms.push_back(buffer("exp_avg", index, p));
    vs.push_back(buffer("exp_avg_sq", index, p));
    decays.push_back(wd);
  });
  adam_step_(params, grads, ms, vs, decays, {lr_, beta1, beta2, eps, correction1, correction2, decoupled});
}

}  // namespace ember::optim
