// Anomaly mode: find the op that first produced a NaN or an infinity.
//
// When on, every op's output is checked as the op records itself (record() in autograd/node.h,
// which every op calls, with or without grad), and every gradient a node's backward returns is
// checked in the engine. The first non-finite value raises ember::AnomalyError naming the op,
// its input shapes and the module path it ran under (modules push their name while their
// forward runs: "blocks.1.attention.qkv"), in forward or in backward:
//   anomaly: op 'log' produced NaN in forward at blocks.1.attention (inputs: [32, 256, 128])
// Switch: EMBER_DETECT_ANOMALY=1 in the environment (read at start-up), set_detect_anomaly(),
// or a DetectAnomalyGuard for a scope. Off by default; when off, each op pays one branch on a
// relaxed atomic load. Module scopes are only pushed while the mode is on.
#pragma once
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace ember {

class Node;

class AnomalyError : public Error {
 public:
  using Error::Error;
};

namespace detail {
extern std::atomic<bool> detect_anomaly_flag;
}

inline bool detect_anomaly() { return detail::detect_anomaly_flag.load(std::memory_order_relaxed); }
void set_detect_anomaly(bool enabled);
// True when the variable is set to a value other than "", "0", "false", "off" or "no".
bool detect_anomaly_from_environment(const char* variable = "EMBER_DETECT_ANOMALY");

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : previous_(detect_anomaly()) { set_detect_anomaly(enabled); }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Pushes a module's name on this thread's module path for the scope (only in anomaly mode).
// `name` must outlive the scope (modules pass their own registered name).
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name) {
    if (detect_anomaly()) [[unlikely]] {
      push(name);
      pushed_ = true;
    }
  }
  ~ModuleScope() {
    if (pushed_) pop();
  }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  static void push(const std::string& name);
  static void pop();
  bool pushed_ = false;
};

// The dotted path of the module scopes open on this thread: "blocks.1.attention";
// "(model top level)" inside only the root module; "(outside any module)" with none open.
std::string current_module_path();

// "NaN", "Inf" or "" (finite, undefined, or not a floating-point tensor).
std::string non_finite_kind(const Tensor& t);

// record()'s check of an op's output (a no-op while a backward formula runs: the engine checks those).
void check_forward_anomaly(const char* op, const Tensor& output, const Tensor* inputs, size_t count);
// The engine's check of the gradients `node`'s backward returned.
void check_backward_anomaly(const Node& node, const std::vector<Tensor>& grads);

// Marks this thread as running backward formulas for the scope.
class BackwardScope {
 public:
  BackwardScope();
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  bool previous_;
};

}  // namespace ember
