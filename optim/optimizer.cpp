// Optimisers: the state and the step's numbers; the update itself is an op of autograd/ops.h (sgd_step_,
// adam_step_: one pass over each parameter's memory, a fused update, no temporaries), on any device.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/update_rules.h"

namespace ember::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  EMBER_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got {}", lr);
  for (auto& group : groups_) {
    EMBER_CHECK(std::isfinite(group.lr_scale) && group.lr_scale >= 0,
                "optimizer: a group's learning-rate scale must be finite and >= 0, got {}", group.lr_scale);
    for (auto& p : group.params) {
      EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "optimizer: parameters must be leaves that require grad");
      EMBER_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous");
    }
  }
}

std::vector<double> Optimizer::lr_scales() const {
  std::vector<double> scales;
  for (const auto& group : groups_)
    if (std::find(scales.begin(), scales.end(), group.lr_scale) == scales.end()) scales.push_back(group.lr_scale);
  return scales;
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

void Optimizer::count_step() {
  EMBER_CHECK(steps_ >= 0 && steps_ < max_steps, "optimizer: step count {} is out of range [0, {})", steps_, max_steps);
  ++steps_;
}

void Optimizer::create_state() {
  for_each_param([&](size_t index, Tensor& p, double) {
    for (const std::string& kind : state_kinds()) buffer(kind, index, p);
  });
}

Optimizer::RetakeLastStep::RetakeLastStep(Optimizer& optimizer) : optimizer_(optimizer), steps_(optimizer.steps_) {
  EMBER_CHECK(steps_ > 0, "optimizer: there is no step to take again (the step count is {})", steps_);
  optimizer_.steps_ = steps_ - 1;
}

void Optimizer::check_state_entry(const std::string&, const std::string&, const Tensor&) const {}

namespace {

// "<index>.<kind>" split, the index in decimal digits as std::to_string writes it, and below
// `count`; otherwise an error naming the entry.
std::pair<size_t, std::string> parse_state_name(const std::string& name, size_t count) {
  const size_t dot = name.find('.');
  const std::string digits = name.substr(0, dot);
  EMBER_CHECK(dot != std::string::npos && !digits.empty() && digits.size() <= 18 &&
                  std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }),
              "optimizer state: unexpected entry '{}' (expected 'step' or '<parameter number>.<kind>')", name);
  const size_t index = size_t(std::stoull(digits));
  EMBER_CHECK(std::to_string(index) == digits, "optimizer state: unexpected entry '{}' (parameter numbers are "
              "written without leading zeros)", name);
  EMBER_CHECK(index < count, "optimizer state: '{}' refers to parameter {}, but there are {}", name, index, count);
  return {index, name.substr(dot + 1)};
}

}  // namespace

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto step = state.find("step");
  EMBER_CHECK(step != state.end() && step->second.numel() == 1 && step->second.dtype() == Dtype::Int64,
              "optimizer state: 'step' is missing or malformed (expected one int64)");
  const int64_t steps = step->second.to(Device::cpu()).item<int64_t>();
  EMBER_CHECK(steps >= 0 && steps <= max_steps, "optimizer state: 'step' is {}, outside [0, {}]", steps, max_steps);
  std::vector<Tensor> params;
  for (auto& group : groups_)
    for (auto& p : group.params) params.push_back(p);
  const std::vector<std::string> kinds = state_kinds();
  std::map<size_t, std::vector<std::string>> kinds_of;  // parameter -> the kinds the state has for it
  for (auto& [name, t] : state) {
    if (name == "step") continue;
    auto [index, kind] = parse_state_name(name, params.size());
    EMBER_CHECK(std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
                "optimizer state: '{}' is not a buffer of this optimiser (its kinds: {})", name,
                kinds.empty() ? std::string("none") : fmt::format("{}", fmt::join(kinds, ", ")));
    EMBER_CHECK(t.shape() == params[index].shape() && t.dtype() == params[index].dtype(),
                "optimizer state: '{}' is {} {}, parameter {} is {} {}", name, dtype_name(t.dtype()),
                shape_str(t.shape()), index, dtype_name(params[index].dtype()), shape_str(params[index].shape()));
    check_state_entry(name, kind, t);
    kinds_of[index].push_back(kind);
  }
  for (const auto& [index, present] : kinds_of) {
    for (const std::string& kind : kinds) {
      EMBER_CHECK(std::find(present.begin(), present.end(), kind) != present.end(),
                  "optimizer state: parameter {} has '{}.{}' but no '{}.{}'", index, index, present.front(), index, kind);
    }
  }
  buffers_.clear();
  for (auto& [name, t] : state)  // each buffer on its parameter's device (a checkpoint is read to the CPU)
    if (name != "step") buffers_[name] = t.to(params[parse_state_name(name, params.size()).first].device()).clone();
  steps_ = steps;
}

std::vector<std::string> Optimizer::missing_state() const {
  std::vector<std::string> missing;
  size_t index = 0;
  for (const auto& group : groups_)
    for (size_t i = 0; i < group.params.size(); ++i, ++index)
      for (const std::string& kind : state_kinds())
        if (!buffers_.count(std::to_string(index) + "." + kind)) missing.push_back(std::to_string(index) + "." + kind);
  return missing;
}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum) : Optimizer(std::move(groups), lr), momentum(momentum) {
  EMBER_CHECK(momentum >= 0, "SGD: momentum must be >= 0, got {}", momentum);
}

std::vector<std::string> SGD::state_kinds() const {
  return momentum != 0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
}

void SGD::step() {
  NoGradGuard no_grad;
  count_step();
  for (double scale : lr_scales()) {
    std::vector<Tensor> params, grads, velocities;
    std::vector<double> decays;
    for_each_param_at(scale, [&](size_t index, Tensor& p, double wd) {
      if (!p.grad().defined()) return;
      params.push_back(p);
      grads.push_back(p.grad());
      if (momentum != 0) velocities.push_back(buffer("momentum", index, p));
      decays.push_back(wd);
    });
    if (!params.empty()) sgd_step_(params, grads, velocities, decays, {lr_ * scale, momentum, steps_ == 1});
  }
}

Adam::Adam(std::vector<ParamGroup> groups, double lr, double beta1, double beta2, double eps, bool decoupled)
    : Optimizer(std::move(groups), lr), beta1(beta1), beta2(beta2), eps(eps), decoupled(decoupled) {
  EMBER_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "Adam: betas must be in [0, 1), got ({}, {})", beta1,
              beta2);
}

std::vector<std::string> Adam::state_kinds() const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::check_state_entry(const std::string& name, const std::string& kind, const Tensor& value) const {
  check_adam_state_entry(name, kind, value);
}

void check_adam_state_entry(const std::string& name, const std::string& kind, const Tensor& value) {
  if (kind != "exp_avg_sq" || value.numel() == 0) return;
  // A second moment is a running mean of squares: a negative one would make sqrt(v) NaN.
  double smallest = 0;
  for (double v : value.detach().to(Device::cpu()).to(Dtype::Float64).contiguous().to_vector<double>())
    smallest = std::min(smallest, v);
  EMBER_CHECK(!(smallest < 0), "optimizer state: '{}' holds {} (a second moment must be >= 0)", name, smallest);
}

AdamHyper Adam::hyper_for(int64_t step, double lr_scale) const {
  return {lr_ * lr_scale, beta1, beta2, eps, 1 - std::pow(beta1, double(step)), 1 - std::pow(beta2, double(step)), decoupled};
}

void Adam::keep_numbers_on_device(Device device) {
  EMBER_CHECK(device.is_cuda(), "Adam: the step's numbers can be kept on a GPU, not on {}", device.str());
  constexpr int64_t words = (sizeof(AdamHyper) + 7) / 8;
  device_numbers_ = zeros({int64_t(lr_scales().size()), words}, Dtype::Int64, device);
  staged_step_ = -1;
}

void Adam::stage_step() {
  EMBER_CHECK(device_numbers_.defined(), "Adam::stage_step: call keep_numbers_on_device first");
  std::vector<int64_t> words(size_t(device_numbers_.numel()), 0);
  const std::vector<double> scales = lr_scales();
  for (size_t s = 0; s < scales.size(); ++s) {
    const AdamHyper hyper = hyper_for(steps_ + 1, scales[s]);
    std::memcpy(words.data() + s * size_t(device_numbers_.size(1)), &hyper, sizeof hyper);
  }
  upload_into(device_numbers_, words.data(), device_numbers_.numel() * 8);  // through pinned staging: no wait
  staged_step_ = steps_ + 1;
  staged_lr_ = lr_;
}

void Adam::step() {
  NoGradGuard no_grad;
  count_step();
  EMBER_CHECK(!device_numbers_.defined() || staged_step_ == steps_, "Adam: step {} keeps its numbers on {}, but "
              "stage_step() was not called before it (the numbers there are step {}'s)", steps_,
              device_numbers_.device().str(), staged_step_);
  EMBER_CHECK(!device_numbers_.defined() || staged_lr_ == lr_, "Adam: step {} keeps its numbers on {}, staged at "
              "learning rate {}, but set_lr({}) came after stage_step()", steps_, device_numbers_.device().str(),
              staged_lr_, lr_);
  // One update per learning-rate scale: the groups that share it share a kernel call.
  const std::vector<double> scales = lr_scales();
  for (size_t s = 0; s < scales.size(); ++s) {
    std::vector<Tensor> params, grads, ms, vs;
    std::vector<double> decays;
    for_each_param_at(scales[s], [&](size_t index, Tensor& p, double wd) {
      if (!p.grad().defined()) return;
      params.push_back(p);
      grads.push_back(p.grad());
      ms.push_back(buffer("exp_avg", index, p));
      vs.push_back(buffer("exp_avg_sq", index, p));
      decays.push_back(wd);
    });
    if (params.empty()) continue;
    adam_step_(params, grads, ms, vs, decays, hyper_for(steps_, scales[s]),
               device_numbers_.defined() ? device_numbers_.select(0, int64_t(s)) : Tensor());
  }
}

}  // namespace ember::optim
