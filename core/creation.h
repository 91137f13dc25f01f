// Creating tensors: constants, ranges and tensors from C++ values (core/creation.cpp). They record no
// graph node (a new tensor has no history), so core makes its own tensors with them (the process
// groups' agreement on strings, the NCCL barrier's one); the ops of autograd/ops.h are above autograd.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace ember {

Tensor zeros(const Shape& shape, Dtype dtype = Dtype::Float32, Device device = Device::cpu());
Tensor ones(const Shape& shape, Dtype dtype = Dtype::Float32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, Dtype dtype = Dtype::Float32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);
Tensor arange(int64_t end, Dtype dtype = Dtype::Int64);
Tensor arange(int64_t start, int64_t end, int64_t step = 1, Dtype dtype = Dtype::Int64);
// A tensor holding `values` (row-major) with `shape` ({} means 1-D of values.size()); T one of float,
// double, int32_t, int64_t, bool (a mask: from_vector<bool>({true, false})) and BFloat16 (TensorElement,
// core/dtype.h: another type does not compile).
template <typename T>
  requires TensorElement<T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape = {}, Device device = Device::cpu());
// tensor({1, 2, 3}) or tensor({1, 2, 3, 4}, {2, 2}, Dtype::Float64)
Tensor tensor(std::initializer_list<double> values, const Shape& shape = {}, Dtype dtype = Dtype::Float32);
Tensor scalar(double value, Dtype dtype = Dtype::Float32, Device device = Device::cpu());

}  // namespace ember
