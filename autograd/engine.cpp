// The backward engine: walks the graph from the output in reverse topological order,
// calling each node's backward once, with all gradients for its output summed first.
#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace ember {
namespace {

thread_local const Node* running = nullptr;  // running_node()

// Marks `node` as the one whose backward runs on this thread for the scope.
class RunningNode {
 public:
  explicit RunningNode(const Node* node) : previous_(running) { running = node; }
  ~RunningNode() { running = previous_; }
  RunningNode(const RunningNode&) = delete;
  RunningNode& operator=(const RunningNode&) = delete;

 private:
  const Node* previous_;
};

// Nodes reachable from `root`, each after every node that feeds gradient into it.
std::vector<Node*> topological_order(Node* root) {
  std::vector<Node*> postorder;
  std::unordered_set<Node*> visited;
  // Iterative DFS (deep graphs would overflow a recursive one): (node, next edge to visit).
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  visited.insert(root);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      Node* child = node->inputs[next++].node.get();
      if (child != nullptr && visited.insert(child).second) stack.push_back({child, 0});
    } else {
      postorder.push_back(node);
      stack.pop_back();
    }
  }
  return {postorder.rbegin(), postorder.rend()};
}

// The part of a gradient tensor an edge's window covers.
Tensor window_of(const Tensor& full, const GradWindow& window) {
  return full.narrow(window.dim, window.start, window.length);
}

// The input's gradient when the first gradient it receives is a window's: zeros, and `grad` in the window.
// The one input-sized buffer of all its windows (chunk's, split's, unbind's pieces: docs/autograd.md).
Tensor zeros_around(const Edge& edge, const Tensor& grad) {
  Tensor full = Tensor::empty(edge.shape, grad.dtype(), grad.device());
  full.zero_();
  window_of(full, edge.window).copy_(grad);
  return full;
}

// The shape the gradient of an edge must have: the input's, or its window's.
Shape expected_shape(const Edge& edge) {
  Shape shape = edge.shape;
  if (edge.window.active()) shape[size_t(edge.window.dim)] = edge.window.length;
  return shape;
}

void accumulate_leaf_grad(TensorImpl* leaf, const Tensor& grad) {
  if (!leaf->grad) {
    // Keep the gradient itself if nothing else can see it; otherwise a private copy, so that
    // in-place updates of one .grad (clipping, say) never change another.
    bool exclusive = grad.impl_ptr().use_count() == 1 && grad.impl()->storage.use_count() == 1 &&
                     grad.is_contiguous() && grad.offset() == 0;
    leaf->grad = exclusive ? grad.impl_ptr() : grad.clone().impl_ptr();
  } else {
    Tensor(leaf->grad).add_(grad);
  }
}

// The same for the gradient of a window of the leaf: added into that window of leaf.grad.
void accumulate_leaf_grad(TensorImpl* leaf, const Edge& edge, const Tensor& grad) {
  if (!edge.window.active()) return accumulate_leaf_grad(leaf, grad);
  if (!leaf->grad) leaf->grad = zeros_around(edge, grad).impl_ptr();
  else window_of(Tensor(leaf->grad), edge.window).add_(grad);
}

// The gradient of a node's output, summed over the consumers seen so far. `owned`: a buffer this walk made
// and nothing else holds, so that a window's gradient can be added into it in place.
struct Pending {
  Tensor grad;
  bool owned = false;
};

// Adds one consumer's gradient (of the whole input, or of the edge's window) into the pending sum.
void accumulate_pending(Pending& slot, const Edge& edge, const Tensor& grad) {
  if (!edge.window.active()) {
    slot = slot.grad.defined() ? Pending{slot.grad + grad, true} : Pending{grad, false};
    return;
  }
  if (!slot.grad.defined()) {
    slot = {zeros_around(edge, grad), true};
    return;
  }
  if (!slot.owned) slot = {slot.grad.clone(), true};  // a gradient some backward returned: not ours to change
  window_of(slot.grad, edge.window).add_(grad);
}

// Gradient-ready hooks (autograd/hooks.h): for each leaf with a hook, how many edges of this pass's
// nodes have yet to deliver to it. The last one delivered (or skipped: no gradient flowed) runs
// its hooks. Empty, and free, when no hook is registered.
class ReadyLeaves {
 public:
  explicit ReadyLeaves(const std::vector<Node*>& order) {
    if (!detail::any_grad_hooks()) return;
    for (Node* node : order)
      for (const Edge& edge : node->inputs)
        if (edge.leaf && detail::has_grad_hooks(edge.leaf.get())) ++remaining_[edge.leaf.get()];
  }
  void delivered(const Edge& edge) {
    if (remaining_.empty() || !edge.leaf) return;
    auto it = remaining_.find(edge.leaf.get());
    if (it != remaining_.end() && --it->second == 0) detail::run_grad_hooks(edge.leaf);
  }
  void skipped(const Node& node) {
    for (const Edge& edge : node.inputs) delivered(edge);
  }

 private:
  std::unordered_map<const TensorImpl*, int> remaining_;
};

}  // namespace

const Node* running_node() { return running; }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  EMBER_CHECK(requires_grad(), "backward: the tensor does not require grad (no input had requires_grad set)");
  Tensor seed = grad;
  if (!seed.defined()) {
    EMBER_CHECK(numel() == 1, "backward: a gradient must be given for a non-scalar output of shape {}",
                shape_str(shape()));
    seed = ones_like(*this);
  }
  EMBER_CHECK(seed.shape() == shape(), "backward: gradient shape {} differs from the output's {}",
              shape_str(seed.shape()), shape_str(shape()));
  // NOTE: every backward formula assumes the gradient has its output's dtype and device; a float64
  // seed for a float32 output would be read as float32 bits by the element-wise kernels.
  EMBER_CHECK(seed.dtype() == dtype(), "backward: the gradient is {} but the output {} is {}; expected a {} gradient",
              dtype_name(seed.dtype()), shape_str(shape()), dtype_name(dtype()), dtype_name(dtype()));
  EMBER_CHECK(seed.device() == device(), "backward: the gradient is on {} but the output {} is on {}; expected a "
              "gradient on {}", seed.device().str(), shape_str(shape()), device().str(), device().str());
  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  BackwardScope in_backward;  // anomaly mode checks what each node returns, not the ops inside it
  if (is_leaf()) {
    accumulate_leaf_grad(impl(), seed);
    if (detail::any_grad_hooks()) detail::run_grad_hooks(impl_);
    return;
  }
  std::unordered_map<Node*, Pending> pending{{grad_fn().get(), Pending{seed, false}}};
  const std::vector<Node*> order = topological_order(grad_fn().get());
  ReadyLeaves ready(order);
  for (Node* node : order) {
    auto found = pending.find(node);
    if (found == pending.end()) {  // nothing flowed into this node
      ready.skipped(*node);
      continue;
    }
    Tensor grad_output = std::move(found->second.grad);
    pending.erase(found);
    EMBER_CHECK(node->backward, "backward: the graph through '{}' was already freed; "
                "call backward(grad, /*retain_graph=*/true) to walk it twice", node->name);
    Grads grads;
    {
      RunningNode scope(node);
      grads = node->backward(grad_output);
    }
    if (detect_anomaly()) [[unlikely]]
      check_backward_anomaly(*node, grads);
    if (!retain_graph) node->backward = nullptr;  // frees the tensors it saved
    EMBER_CHECK(grads.size() == node->inputs.size(), "backward of {}: returned {} gradients for {} inputs",
                node->name, grads.size(), node->inputs.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& edge = node->inputs[i];
      if (!edge.active() || !grads[i].defined()) {
        ready.delivered(edge);  // nothing to add, but the leaf may now be complete
        continue;
      }
      EMBER_CHECK(grads[i].shape() == expected_shape(edge), "backward of {}: gradient {} has shape {}, input has {}{}",
                  node->name, i, shape_str(grads[i].shape()), shape_str(edge.shape),
                  edge.window.active() ? fmt::format(" (its window along dim {}: {})", edge.window.dim,
                                                     shape_str(expected_shape(edge)))
                                       : std::string());
      if (edge.leaf) {
        accumulate_leaf_grad(edge.leaf.get(), edge, grads[i]);
        ready.delivered(edge);
      } else {
        accumulate_pending(pending[edge.node.get()], edge, grads[i]);
      }
    }
  }
}

Tensor& Tensor::requires_grad_(bool enabled) {
  EMBER_CHECK(is_leaf(), "requires_grad_: only leaves can change requires_grad (this tensor was made by {})",
              grad_fn()->name);
  EMBER_CHECK(!enabled || is_real(dtype()), "requires_grad_: {} tensors cannot require grad",
              dtype_name(dtype()));
  impl_->requires_grad = enabled;
  return *this;
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

}  // namespace ember
