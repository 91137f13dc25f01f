// Anomaly mode: the switch, the module path stack and the finite-value checks.
#include "autograd/anomaly.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace ember {

namespace detail {
std::atomic<bool> detect_anomaly_flag{detect_anomaly_from_environment()};
}

namespace {
thread_local std::vector<const std::string*> module_stack;
thread_local bool in_backward = false;
thread_local bool checking = false;  // the check's own copies/conversions are ops too: not re-checked

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string text;
  for (size_t i = 0; i < shapes.size(); ++i) text += (i ? ", " : "") + shape_str(shapes[i]);
  return text.empty() ? "none" : text;
}

template <typename T>
std::string scan(const T* p, int64_t n) {
  bool inf = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(p[i])) return "NaN";
    if (std::isinf(p[i])) inf = true;
  }
  return inf ? "Inf" : "";
}

}  // namespace

void set_detect_anomaly(bool enabled) { detail::detect_anomaly_flag.store(enabled, std::memory_order_relaxed); }

bool detect_anomaly_from_environment(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return false;
  for (const char* off : {"", "0", "false", "off", "no"})
    if (std::strcmp(value, off) == 0) return false;
  return true;
}

void ModuleScope::push(const std::string& name) { module_stack.push_back(&name); }
void ModuleScope::pop() { module_stack.pop_back(); }

std::string current_module_path() {
  if (module_stack.empty()) return "(outside any module)";
  std::string path;
  for (const std::string* name : module_stack) {
    if (name->empty()) continue;
    path += (path.empty() ? "" : ".") + *name;
  }
  return path.empty() ? "(model top level)" : path;
}

BackwardScope::BackwardScope() : previous_(in_backward) { in_backward = true; }
BackwardScope::~BackwardScope() { in_backward = previous_; }

std::string non_finite_kind(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return "";
  bool was_checking = checking;
  checking = true;
  struct Restore {
    bool value;
    ~Restore() { checking = value; }
  } restore{was_checking};
  NoGradGuard no_grad;
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.to(Device::cpu());
  c = c.contiguous();
  return c.dtype() == Dtype::Float32 ? scan(c.data<float>(), c.numel()) : scan(c.data<double>(), c.numel());
}

void check_forward_anomaly(const char* op, const Tensor& output, const Tensor* inputs, size_t count) {
  if (in_backward || checking) return;
  std::string kind = non_finite_kind(output);
  if (kind.empty()) return;
  std::vector<Shape> shapes;
  std::string already;
  for (size_t i = 0; i < count; ++i) {
    if (!inputs[i].defined()) continue;
    shapes.push_back(inputs[i].shape());
    std::string input_kind = non_finite_kind(inputs[i]);
    if (!input_kind.empty() && already.empty())
      already = fmt::format("; input {} already held {} (made outside the checked ops?)", i, input_kind);
  }
  throw AnomalyError(fmt::format("anomaly: op '{}' produced {} in forward at {} (inputs: {}){}", op, kind,
                                 current_module_path(), shapes_text(shapes), already));
}

void check_backward_anomaly(const Node& node, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    std::string kind = non_finite_kind(grads[i]);
    if (kind.empty()) continue;
    throw AnomalyError(fmt::format(
        "anomaly: op '{}' produced {} in backward (the gradient of its input {}, shape {}); the op ran in forward "
        "at {} (inputs: {})",
        node.name, kind, i, shape_str(grads[i].shape()), node.module_path.empty() ? "(not recorded)" : node.module_path,
        shapes_text(node.input_shapes)));
  }
}

}  // namespace ember
