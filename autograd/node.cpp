// Recording ops into the graph.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/node.h"

namespace ember {

Node::~Node() {
  std::vector<std::shared_ptr<Node>> last_holder_of;  // nodes whose only reference is an edge being freed
  auto take_inputs = [&](Node& node) {
    for (Edge& edge : node.inputs)
      if (edge.node && edge.node.use_count() == 1) last_holder_of.push_back(std::move(edge.node));
  };
  take_inputs(*this);
  while (!last_holder_of.empty()) {
    std::shared_ptr<Node> node = std::move(last_holder_of.back());
    last_holder_of.pop_back();
    take_inputs(*node);  // its inputs move here first, so that freeing it frees no further node
  }
}

bool any_requires_grad(const Tensor* inputs, size_t count) {
  if (!grad_enabled()) return false;
  for (size_t i = 0; i < count; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) return true;
  return false;
}

void attach_node(const char* name, Tensor& output, const Tensor* inputs, size_t count, BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(backward);
  for (size_t i = 0; i < count; ++i) {
    const Tensor& t = inputs[i];
    Edge edge;
    if (t.defined() && t.requires_grad()) {
      if (t.is_leaf()) edge.leaf = t.impl_ptr();
      else edge.node = t.grad_fn();
      edge.shape = t.shape();
    }
    node->inputs.push_back(std::move(edge));
  }
  if (detect_anomaly()) {
    node->module_path = current_module_path();
    for (size_t i = 0; i < count; ++i) node->input_shapes.push_back(inputs[i].defined() ? inputs[i].shape() : Shape{});
  }
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

}  // namespace ember
