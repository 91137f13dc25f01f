// Tensor: construction, accessors, raw data access and device checks.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"

#include "core/error.h"

namespace ember {

Tensor Tensor::empty(const Shape& shape, Dtype dtype, Device device) {
  for (int64_t s : shape) EMBER_CHECK(s >= 0, "empty: negative size in shape {}", shape_str(shape));
  int64_t n = ember::numel(shape);
  constexpr int64_t kMaxBytes = int64_t(1) << 46;  // 64 TiB: beyond any machine; catches overflowed shapes
  EMBER_CHECK(n <= kMaxBytes / dtype_size(dtype),
              "empty: shape {} of {} is too large to allocate: {} elements x {} bytes is more than the {} TiB any machine has", shape_str(shape),
              dtype_name(dtype), n, dtype_size(dtype), kMaxBytes >> 40);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(n * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[size_t(normalize_dim(d, dim(), "size"))]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  EMBER_CHECK(defined(), "data: the tensor is undefined");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(impl_->dtype);
}

template <typename T>
T* Tensor::data() const {
  EMBER_CHECK(defined(), "data: the tensor is undefined");
  EMBER_CHECK(dtype() == dtype_of<T>(), "data<{}>: the tensor holds {}", dtype_name(dtype_of<T>()),
              dtype_name(dtype()));
  return static_cast<T*>(raw_data());
}

template <typename T>
T Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item: the tensor has {} elements (shape {}), expected 1", numel(), shape_str(shape()));
  return to_vector<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor source = device().is_cpu() ? *this : to(Device::cpu());
  Tensor typed = source.dtype() == dtype_of<T>() ? source.contiguous() : source.detach().to(dtype_of<T>());
  const T* p = typed.data<T>();
  return std::vector<T>(p, p + typed.numel());
}

#define EMBER_INSTANTIATE(T)                          \
  template T* Tensor::data<T>() const;                \
  template T Tensor::item<T>() const;                 \
  template std::vector<T> Tensor::to_vector<T>() const;
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
EMBER_INSTANTIATE(int32_t)
EMBER_INSTANTIATE(int64_t)
EMBER_INSTANTIATE(bool)
EMBER_INSTANTIATE(BFloat16)
#undef EMBER_INSTANTIATE

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    EMBER_CHECK(t->defined(), "{}: an input tensor is undefined", op);
    if (first == nullptr) first = t;
    EMBER_CHECK(t->device() == first->device(), "{}: tensors on different devices ({} and {})", op,
                first->device().str(), t->device().str());
  }
}

void check_cpu(const char* op, const Tensor& tensor) {
  EMBER_CHECK(tensor.device().is_cpu(), "{}: not implemented on {} yet", op, tensor.device().str());
}

}  // namespace ember
