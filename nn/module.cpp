// Module: parameter and sub-module registration, and the walks over the module tree.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

#include "autograd/grad_mode.h"
#include "core/error.h"

namespace ember::nn {

Parameter& Module::register_parameter(const std::string& name, Tensor value) {
  value.requires_grad_(true);
  parameters_.emplace_back(name, std::move(value));
  return parameters_.back().second;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, p] : parameters_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

void Module::to(Dtype dtype) {
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.dtype() == dtype) continue;
    Tensor converted = p.detach().to(dtype).contiguous();
    TensorImpl* impl = p.impl();
    impl->storage = converted.impl()->storage;
    impl->strides = converted.strides();
    impl->offset = converted.offset();
    impl->dtype = dtype;
    impl->grad.reset();
  }
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.device() == device) continue;
    // The handle stays the same (optimisers and owners keep it); its storage moves.
    Tensor moved = p.detach().contiguous().to(device);
    TensorImpl* impl = p.impl();
    impl->storage = moved.impl()->storage;
    impl->strides = moved.strides();
    impl->offset = moved.offset();
    impl->grad.reset();
  }
}

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : named_parameters()) out.emplace(name, p);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  NamedTensors own = named_parameters();
  for (auto& [name, p] : own) {
    auto it = state.find(name);
    EMBER_CHECK(it != state.end(), "load_state_dict: parameter '{}' is missing", name);
    EMBER_CHECK(it->second.shape() == p.shape(), "load_state_dict: parameter '{}' has shape {} in the state, {} in the model",
                name, shape_str(it->second.shape()), shape_str(p.shape()));
    EMBER_CHECK(it->second.dtype() == p.dtype(), "load_state_dict: parameter '{}' is {} in the state, {} in the model",
                name, dtype_name(it->second.dtype()), dtype_name(p.dtype()));
  }
  EMBER_CHECK(state.size() == own.size(), "load_state_dict: the state has {} tensors, the model {} parameters{}",
              state.size(), own.size(), [&] {
                for (auto& [name, t] : state) {
                  bool known = false;
                  for (auto& [own_name, p] : own) known = known || own_name == name;
                  if (!known) return fmt::format(" (unexpected: '{}')", name);
                }
                return std::string();
              }());
  NoGradGuard no_grad;
  for (auto& [name, p] : own) p.copy_(state.at(name));
}

}  // namespace ember::nn
