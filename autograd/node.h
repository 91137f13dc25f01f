// The autograd graph: a Node per recorded op, its edges to the inputs, and record(), which ops call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "autograd/saved_tensor.h"
#include "core/tensor.h"

namespace ember {

class Node;

// Gradients for an op's inputs, one per input; an undefined Tensor means "no gradient".
using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

// A window of an input along one dim: input.narrow(dim, start, length). dim < 0: the whole input.
struct GradWindow {
  int64_t dim = -1;
  int64_t start = 0;
  int64_t length = 0;
  bool active() const { return dim >= 0; }
};

// Where an input's gradient goes: the node that produced it, or the leaf that collects it.
struct Edge {
  std::shared_ptr<Node> node;          // set for tensors computed by an op
  std::shared_ptr<TensorImpl> leaf;    // set for leaves that require grad
  Shape shape;                         // the input's shape, to check what backward returns
  // Set by a narrowing view (narrow, and so select, chunk, split, unbind): the backward returns the gradient
  // of this window only, and the engine adds it into that window of the input's gradient, one buffer for
  // all the windows an input sends (docs/autograd.md, "Slices").
  GradWindow window;
  bool active() const { return node || leaf; }
};

class Node {
 public:
  std::string name;           // the op, for error messages: "matmul", "softmax", ...
  std::vector<Edge> inputs;   // one per op input, in order
  BackwardFn backward;        // grad of the output -> grads of the inputs; reset once used
  // Recorded only in anomaly mode (autograd/anomaly.h), for the backward check's message.
  std::string module_path;          // where in the model the op ran: "blocks.1.attention"
  std::vector<Shape> input_shapes;  // every input's shape

  // Frees the chain of nodes only this one still holds one by one, not recursively: a graph of
  // 20,000 ops in a row would otherwise take 20,000 nested destructor calls (a stack overflow
  // under clang's AddressSanitizer, whose frames are larger).
  ~Node();
};

// The node whose backward formula runs on this thread now, or nullptr: named in the errors of
// autograd/saved_tensor.h.
const Node* running_node();

// True when grad mode is on and any of the inputs requires grad: then the op must record.
bool any_requires_grad(const Tensor* inputs, size_t count);
inline bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  return any_requires_grad(inputs.begin(), inputs.size());
}

// Attaches a Node to `output` so that backward() reaches the inputs through `backward`.
void attach_node(const char* name, Tensor& output, const Tensor* inputs, size_t count, BackwardFn backward);

// What every op calls after its forward: records the backward, unless no input needs a
// gradient (then it does nothing, and never builds the std::function). In anomaly mode it
// first checks the output for NaN/Inf, with or without grad (autograd/anomaly.h).
template <typename Fn>
void record(const char* name, Tensor& output, std::initializer_list<Tensor> inputs, Fn&& backward) {
  if (detect_anomaly()) [[unlikely]]
    check_forward_anomaly(name, output, inputs.begin(), inputs.size());
  if (any_requires_grad(inputs.begin(), inputs.size()))
    attach_node(name, output, inputs.begin(), inputs.size(), BackwardFn(std::forward<Fn>(backward)));
}
// The same for ops with a variable number of inputs (cat, stack).
template <typename Fn>
void record(const char* name, Tensor& output, const std::vector<Tensor>& inputs, Fn&& backward) {
  if (detect_anomaly()) [[unlikely]]
    check_forward_anomaly(name, output, inputs.data(), inputs.size());
  if (any_requires_grad(inputs.data(), inputs.size()))
    attach_node(name, output, inputs.data(), inputs.size(), BackwardFn(std::forward<Fn>(backward)));
}

}  // namespace ember
