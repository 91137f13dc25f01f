// The CUDA backend for tensors: the operand layout an op hands a raw kernel of core/cuda_ops.h
// (cuda/*.cu), and host C++ wrappers that lay operands out, launch and allocate the results for the
// ops that share kernels. The ops in core/ops/*.cpp have checked their inputs (devices, dtypes,
// shapes) and route a CUDA tensor here in a line or two; CPU tensors never come here.
// In a build without CUDA every kernel behind these raises "this build of Ember has no CUDA
// backend" (core/cuda_ops_stubs.cpp); no tensor can be on a GPU there anyway.
// NOTE: compiled by CI and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#pragma once
#include <cstdint>
#include <vector>

#include "core/attention_band.h"
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

// ---- Fused attention (cuda/attention_kernels.cu): qkv contiguous [B, T, 3 D], mask contiguous bool [B, T]
// or undefined, band: none or sliding-window attention's (window >= 0, `global` leading tokens; tiles outside
// it skipped). `lse` receives the per-row log-sum-exp the backward needs. bf16 (float32 qkv), or a bfloat16
// qkv: the products' operands in bfloat16, the softmax in float32 (cuda::attention_forward_bf16).
Tensor attention_forward(const Tensor& qkv, int64_t heads, const Tensor& mask, bool causal, AttentionBand band,
                         Tensor& lse, Tensor* weights, bool bf16 = false);
Tensor attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& mask, bool causal, AttentionBand band, bool bf16 = false);

// Waits for the device's queued work (for timing).
void synchronize(Device device);

}  // namespace ember::gpu
