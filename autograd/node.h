// The autograd graph: a Node per recorded op, its edges to the inputs, and record(), which ops call.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/tensor.h"

namespace ember {

class Node;

// Gradients for an op's inputs, one per input; an undefined Tensor means "no gradient".
using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

// Where an input's gradient goes: the node that produced it, or the leaf that collects it.
struct Edge {
  std::shared_ptr<Node> node;          // set for tensors computed by an op
  std::shared_ptr<TensorImpl> leaf;    // set for leaves that require grad
  Shape shape;                         // the input's shape, to check what backward returns
  bool active() const { return node || leaf; }
};

class Node {
 public:
  std::string name;           // the op, for error messages: "matmul", "softmax", ...
  std::vector<Edge> inputs;   // one per op input, in order
  BackwardFn backward;        // grad of the output -> grads of the inputs; reset once used
};

// True when grad mode is on and any of `inputs` requires grad: then the op must record.
bool any_requires_grad(std::initializer_list<Tensor> inputs);

// Attaches a Node to `output` so that backward() reaches `inputs` through `backward`.
// Does nothing (and never builds the std::function) when no input needs a gradient.
void attach_node(const char* name, Tensor& output, std::initializer_list<Tensor> inputs, BackwardFn backward);

template <typename Fn>
void record(const char* name, Tensor& output, std::initializer_list<Tensor> inputs, Fn&& backward) {
  if (any_requires_grad(inputs)) attach_node(name, output, inputs, BackwardFn(std::forward<Fn>(backward)));
}

}  // namespace ember
