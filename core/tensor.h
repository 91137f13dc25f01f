// Tensor: a typed, shaped, strided view of reference-counted storage that can record autograd history.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ember {

class Node;  // autograd/node.h: the op that produced a tensor, with its backward

// Everything a tensor is. Several Tensor handles (and several views) can share one TensorImpl's storage.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;      // in elements, per dimension
  int64_t offset = 0;   // in elements, from the start of storage
  Dtype dtype = Dtype::Float32;

  // Autograd. A leaf that requires grad collects gradients in `grad`; a tensor computed from
  // one has `grad_fn`, the graph node that knows how to send its gradient back to the inputs.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage (used for "no gradient")
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A new, uninitialised, contiguous tensor.
  static Tensor empty(const Shape& shape, Dtype dtype = Dtype::Float32, Device device = Device::cpu());

  // ---- What it is
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const { return ember::numel(impl_->shape); }
  Dtype dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  bool is_contiguous() const;
  std::string str() const;  // the values, abbreviated like PyTorch (core/print.cpp)

  // ---- Raw data (CPU tensors). data<T>() points at element [0, 0, ...] and checks T.
  template <typename T> T* data() const;
  void* raw_data() const;
  template <typename T> T item() const;                // the value of a one-element tensor
  template <typename T> std::vector<T> to_vector() const;  // all values in row-major order

  // ---- Autograd (autograd/engine.cpp)
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& requires_grad_(bool enabled = true);  // only on leaves
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& grad) { impl_->grad = grad.impl_; }
  void zero_grad() { impl_->grad.reset(); }
  // Backpropagates from this tensor: a scalar by default, or with the gradient `grad` given.
  // The graph is freed as it is walked unless retain_graph.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same data, no history, requires_grad false

  // ---- Views: share storage, copy nothing; all differentiable (autograd/ops/views.cpp)
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // [start, end), negatives from the end
  Tensor select(int64_t dim, int64_t index) const;               // narrow + squeeze
  Tensor expand(const Shape& shape) const;    // broadcast size-1 dims without copying
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten() const { return reshape({numel()}); }
  Tensor contiguous() const;  // itself when contiguous, else a contiguous copy

  // ---- Copies and conversions
  Tensor clone() const;                // a contiguous copy (differentiable)
  Tensor to(Dtype dtype) const;        // differentiable between floating dtypes
  Tensor to(Device device) const;

  // ---- In-place updates outside autograd (optimisers, initialisation); refuse tensors that need grad history.
  Tensor& copy_(const Tensor& source);  // broadcast source into this
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other (other broadcasts)
  Tensor& mul_(double value);
  // Records an in-place write of this tensor's memory: the ops above call it, and so must any code that
  // writes a tensor's data in place, so that autograd sees the change (autograd/saved_tensor.h).
  void bump_version() const { impl_->storage->bump_version(); }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A view of `base`'s storage with another shape/strides/offset (no autograd; the ops in views.cpp add it).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);
// Errors naming `op` unless every tensor is defined and on the same device.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
void check_cpu(const char* op, const Tensor& tensor);

}  // namespace ember
