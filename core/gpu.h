// The CUDA backend's element-wise plumbing for tensors: the operand layout (any strides, operands
// broadcast to the output) that the element-wise kernels of core/cuda_ops.h take, and the copies,
// fills and selects that many ops share. The structural kernels are not here: each is declared once
// in core/kernels.h, for every device. CPU tensors never come here.
// In a build without CUDA every kernel behind these raises "this build of Ember has no CUDA
// backend" (core/cuda_ops_stubs.cpp); no tensor can be on a GPU there anyway.
// NOTE: compiled by CI and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#pragma once
#include <cstdint>
#include <vector>

#include "core/cuda_ops.h"
#include "core/tensor.h"

namespace ember::gpu {

// ---- Operand layout: how an op hands a tensor to a kernel of core/cuda_ops.h
// The output shape as the kernels take it (at most cuda::kMaxDims dims).
cuda::Shape8 shape8(const Shape& shape, const char* op);
// t read over `shape` (t broadcast to it): its data, dtype, and element strides (0 along broadcast dims).
cuda::Operand operand(const Tensor& t, const Shape& shape, const char* op);

// ---- Element-wise (any strides; operands broadcast to the output)
void copy(const Tensor& src, const Tensor& dst);  // dst = src (broadcast, converted to dst's dtype)
void fill(const Tensor& dst, double value);
void add_into(const Tensor& dst, const Tensor& src, double alpha);  // dst += alpha * src
void scale(const Tensor& dst, double value);                         // dst *= value
Tensor select(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape);  // cond ? a : b

// Waits for the device's queued work (for timing).
void synchronize(Device device);

}  // namespace ember::gpu
