// Creating tensors: constants, ranges and tensors from C++ values (core/creation.h). Nothing here
// records a graph node.
#include "core/creation.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace ember {

Tensor full(const Shape& shape, double value, Dtype dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.fill_(value);
  return t;
}
Tensor zeros(const Shape& shape, Dtype dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, Dtype dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& like) { return zeros(like.shape(), like.dtype(), like.device()); }
Tensor ones_like(const Tensor& like) { return ones(like.shape(), like.dtype(), like.device()); }
Tensor full_like(const Tensor& like, double value) { return full(like.shape(), value, like.dtype(), like.device()); }

Tensor arange(int64_t end, Dtype dtype) { return arange(0, end, 1, dtype); }

Tensor arange(int64_t start, int64_t end, int64_t step, Dtype dtype) {
  EMBER_CHECK(step != 0, "arange: step must not be 0");
  int64_t count = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  Tensor t = Tensor::empty({count}, dtype);
  dispatch_all(dtype, "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(start + i * step);
  });
  return t;
}

template <typename T>
  requires TensorElement<T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  Shape actual = shape.empty() ? Shape{int64_t(values.size())} : shape;
  EMBER_CHECK(numel(actual) == int64_t(values.size()), "from_vector: {} values do not fill shape {}", values.size(),
              shape_str(actual));
  Tensor t = Tensor::empty(actual, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t.to(device);  // t itself on the CPU
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, Device);  // bit-packed: copied bit by bit
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, const Shape&, Device);

Tensor tensor(std::initializer_list<double> values, const Shape& shape, Dtype dtype) {
  return from_vector(std::vector<double>(values), shape).to(dtype);
}

Tensor scalar(double value, Dtype dtype, Device device) { return full({}, value, dtype, device); }

}  // namespace ember
