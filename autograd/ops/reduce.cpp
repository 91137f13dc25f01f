// Reductions: sum, mean, max, var over any dims, with keepdim; sum_to undoes broadcasting.
// Kernels: core/kernels.h (CPU: core/cpu/reduce.cpp, GPU: cuda/reduce_kernels.cu).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// Sorted, unique, non-negative dims; {} means every dim.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  EMBER_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: a dim is repeated", op);
  return out;
}

Shape drop_dims(const Shape& keep_shape, const std::vector<int64_t>& dims) {
  Shape out;
  for (size_t d = 0; d < keep_shape.size(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), int64_t(d))) out.push_back(keep_shape[d]);
  return out;
}

int64_t count_over(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[size_t(d)];
  return n;
}

// x as contiguous [outer, R, inner], R the reduced dims (`dims`: sorted, unique, non-negative).
struct ReduceLayout {
  Tensor src;
  int64_t outer = 1, R = 1, inner = 1;
};

// When the reduced dims (ignoring size-1 dims) are one consecutive block of the others, x itself
// (made contiguous); else x with the reduced dims moved to the end, copied once.
ReduceLayout reduce_layout(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<bool> reduced(size_t(x.dim()), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  std::vector<int64_t> sized;  // dims of size != 1
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[size_t(d)] != 1) sized.push_back(d);
  int64_t first = -1, last = -1;  // positions in `sized` of the first and last reduced dim
  for (size_t k = 0; k < sized.size(); ++k)
    if (reduced[size_t(sized[k])]) {
      if (first < 0) first = int64_t(k);
      last = int64_t(k);
    }
  bool block = true;
  for (int64_t k = first; k >= 0 && k <= last; ++k) block = block && reduced[size_t(sized[size_t(k)])];
  ReduceLayout l;
  if (block) {
    l.src = x.detach().contiguous();
    for (int64_t k = 0; k < int64_t(sized.size()); ++k) {
      int64_t s = x.shape()[size_t(sized[size_t(k)])];
      if (first >= 0 && k >= first && k <= last) l.R *= s;
      else if (first >= 0 && k > last) l.inner *= s;
      else l.outer *= s;
    }
  } else {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!reduced[size_t(d)]) order.push_back(d), l.outer *= x.shape()[size_t(d)];
    for (int64_t d = 0; d < x.dim(); ++d)
      if (reduced[size_t(d)]) order.push_back(d), l.R *= x.shape()[size_t(d)];
    l.src = x.detach().permute(order).contiguous();
  }
  return l;
}

// The checks every device relies on, then the reduction kernel; the result keeps the reduced dims as size 1.
Tensor reduce_kernel(const Tensor& x, const std::vector<int64_t>& dims, ReduceKind kind, const char* op) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", op);
  if (kind == ReduceKind::Max)
    for (int64_t d : dims)
      EMBER_CHECK(x.shape()[size_t(d)] > 0, "{}: cannot take the max over an empty dim {} (shape {})", op, d,
                  shape_str(x.shape()));
  Shape keep_shape = x.shape();
  for (int64_t d : dims) keep_shape[size_t(d)] = 1;
  const ReduceLayout l = reduce_layout(x, dims);
  const On on = kernel_on(x);
  Tensor out = Tensor::empty(keep_shape, x.dtype(), x.device());
  Tensor scratch = Tensor::empty({kernel::reduce_scratch(on, l.outer, l.R, l.inner)}, x.dtype(), x.device());
  kernel::reduce(on, kind, l.src.raw_data(), out.raw_data(), l.outer, l.R, l.inner, scratch.raw_data());
  return out;
}

}  // namespace

// d sum / dx = 1 for every x: the gradient is dy broadcast back over the reduced dims.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  if (x.defined() && x.dtype() == Dtype::BFloat16)  // summed in float32, rounded once (the input's dtype)
    return sum(widened_from_bf16(x), dims_in, keepdim).to(Dtype::BFloat16);
  auto dims = normalize_dims(dims_in, x.dim(), "sum");
  Tensor kept = reduce_kernel(x, dims, ReduceKind::Sum, "sum");
  Tensor y = keepdim ? kept : kept.view(drop_dims(kept.shape(), dims));
  record("sum", y, {x}, [in = x.shape(), keep = kept.shape()](const Tensor& g) -> Grads {
    return {g.reshape(keep).expand(in)};
  });
  return y;
}

// A mean of nothing (an empty dim) is 0 / 0 = NaN, like PyTorch's.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t n = count_over(x.shape(), normalize_dims(dims, x.dim(), "mean"));
  if (n == 0) return sum(x, dims, keepdim) * std::numeric_limits<double>::quiet_NaN();
  return sum(x, dims, keepdim) * (1.0 / double(n));
}

// d max / dx = 1 where x equals the max (shared equally between ties), 0 elsewhere.
// The max of nothing is undefined: an empty reduced dim is an error (as in PyTorch), on every device.
Tensor max(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  if (x.defined() && x.dtype() == Dtype::BFloat16)  // exact: the max of bfloat16 values is one of them
    return max(widened_from_bf16(x), dims_in, keepdim).to(Dtype::BFloat16);
  auto dims = normalize_dims(dims_in, x.dim(), "max");
  for (int64_t d : dims)
    EMBER_CHECK(x.shape()[size_t(d)] > 0, "max: cannot take the max over an empty dim {} (shape {})", d,
                shape_str(x.shape()));
  Tensor kept = reduce_kernel(x, dims, ReduceKind::Max, "max");
  Tensor y = keepdim ? kept : kept.view(drop_dims(kept.shape(), dims));
  record("max", y, {x}, [saved_x = save(x), saved_kept = save(kept), dims](const Tensor& g) -> Grads {
    const Tensor &x = saved_x.get(), &kept = saved_kept.get();
    Tensor is_max = eq(x, kept).to(x.dtype());
    Tensor ties = reduce_kernel(is_max, dims, ReduceKind::Sum, "max");
    return {is_max * (g.reshape(kept.shape()) / ties)};
  });
  return y;
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  int64_t n = count_over(x.shape(), normalize_dims(dims, x.dim(), "var"));
  EMBER_CHECK(n - correction > 0, "var: {} elements with correction {} leave no degrees of freedom", n, correction);
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) * (1.0 / double(n - correction));
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  EMBER_CHECK(x.defined(), "argmax: the input tensor is undefined");
  if (x.dtype() == Dtype::BFloat16) return argmax(x.detach().to(Dtype::Float32), dim, keepdim);  // exact
  dim = normalize_dim(dim, x.dim(), "argmax");
  EMBER_CHECK(is_floating(x.dtype()), "argmax: expected a floating tensor (float32 or float64), got {}",
              dtype_name(x.dtype()));
  EMBER_CHECK(x.dim() == 0 || x.size(dim) > 0, "argmax: dim {} is empty (shape {})", dim, shape_str(x.shape()));
  Shape keep_shape = x.shape();
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    else if (d == dim) n = x.size(d), keep_shape[size_t(d)] = 1;
    else inner *= x.size(d);
  }
  const On on = kernel_on(x);
  Tensor src = x.detach().contiguous();
  Tensor kept = Tensor::empty(keep_shape, Dtype::Int64, x.device());
  Tensor scratch = Tensor::empty({kernel::reduce_scratch(on, outer, n, inner)}, x.dtype(), x.device());
  kernel::argmax(on, src.raw_data(), kept.data<int64_t>(), outer, n, inner, scratch.raw_data());
  return keepdim ? kept : kept.squeeze(dim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  EMBER_CHECK(x.dim() >= int64_t(shape.size()), "sum_to: cannot sum {} to the larger {}", shape_str(x.shape()),
              shape_str(shape));
  std::vector<int64_t> dims;
  size_t lead = x.shape().size() - shape.size();
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (d < lead) dims.push_back(int64_t(d));
    else if (shape[d - lead] == 1 && x.shape()[d] != 1) dims.push_back(int64_t(d));
    else EMBER_CHECK(shape[d - lead] == x.shape()[d], "sum_to: {} does not broadcast to {}", shape_str(shape),
                     shape_str(x.shape()));
  }
  return sum(x, dims, /*keepdim=*/true).reshape(shape);
}

}  // namespace ember
