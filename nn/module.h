// Module: the base of every layer. It registers parameters and sub-modules by name, so that
// parameters(), named_parameters(), train()/eval() and the state dict walk the whole tree.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/anomaly.h"
#include "core/tensor.h"

namespace ember::nn {

// A parameter is a leaf tensor that requires grad, registered on a module under a name.
using Parameter = Tensor;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;

  // "blocks.0.attention.qkv.weight"-style names, in registration order.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  void zero_grad();
  // Converts every parameter to `dtype` in place (float64 for gradchecks); handles held by
  // layers (weight, bias) see the change because they share the parameter's TensorImpl.
  void to(Dtype dtype);
  void to(Device device);  // moves every parameter's storage (gradients are dropped)

  // Training mode switches dropout on; eval() switches it off. Applies to every sub-module.
  void train(bool training = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // The parameters by name (sharing memory with the module).
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in by name. Missing or unexpected names and shape or dtype mismatches are
  // errors that name the parameter; nothing is changed unless every check passes.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // The name this module was registered under in its parent ("attention", "blocks.1"); "" for a root.
  const std::string& module_name() const { return name_; }

 protected:
  // Every forward opens one first: `auto scope = forward_scope();`. In anomaly mode it puts the
  // module's name on the module path that NaN/Inf reports give (autograd/anomaly.h); otherwise free.
  ModuleScope forward_scope() const { return ModuleScope(name_); }

  Parameter& register_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    module->name_ = name;
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;

  std::vector<std::pair<std::string, Parameter>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::string name_;
};

}  // namespace ember::nn
