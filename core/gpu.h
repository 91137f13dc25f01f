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
// x * keep / (1 - p) with the CPU's mask (core/ops/dropout.cpp): contiguous result.
// With `state` (device memory, a CUDA graph's step): the seed is state[0] and `first` counts from state[1].
Tensor dropout_mask(const Tensor& x, uint64_t seed, uint64_t first, uint64_t threshold, double scale,
                    const uint64_t* state = nullptr);

// t (contiguous, floating) = element i of a uniform [a, b) or normal (mean a, std b) draw from `first`.
void random_fill(const Tensor& t, bool normal, uint64_t seed, uint64_t first, double a, double b);

// ---- GEMM (cuBLAS), row-major, strides in elements; see core/cuda_ops.h
template <typename T>
void gemm(int device, int64_t batch, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_bs, int64_t a_rs,
          int64_t a_cs, const T* B, int64_t b_bs, int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_bs, int64_t ldc) {
  cuda::gemm(device, sizeof(T) == 8, batch, M, N, K, A, a_rs, a_cs, a_bs, B, b_rs, b_cs, b_bs, double(beta), C, ldc,
             c_bs);
}
// float32 operands multiplied as bfloat16, summed in float32 (mixed precision; cuda::gemm_bf16).
inline void gemm_bf16(int device, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t a_bs,
                      int64_t a_rs, int64_t a_cs, const float* B, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta,
                      float* C, int64_t c_bs, int64_t ldc) {
  cuda::gemm_bf16(device, batch, M, N, K, A, a_rs, a_cs, a_bs, B, b_rs, b_cs, b_bs, double(beta), C, ldc, c_bs);
}
// True when cuBLAS can read x's last two dims in place (unit stride along one, a valid leading dim).
bool gemm_readable(const Tensor& x);
// y [rows, N] = x [rows, K] W^T (+ b); dx = g W; dW = g^T x (all contiguous; float32 or float64).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, int64_t rows, int64_t K,
                    int64_t N);
void linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor* dw,
                     int64_t rows, int64_t K, int64_t N);
// The mixed-precision linear as the CPU's (core/ops/linear.cpp): y [rows, N] bfloat16 = x W^T + b, x float32
// or bfloat16, W and b float32, summed in float32 from the bias and rounded once; from a bfloat16 g,
// dx = g W in dx's dtype and dW = g^T x in float32 (all contiguous; cuda::gemm_bf16_typed).
void linear_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, int64_t rows, int64_t K,
                         int64_t N);
void linear_backward_bf16(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor* dw,
                          int64_t rows, int64_t K, int64_t N);

// ---- Optimisers: one fused launch over all the parameters (core/update_rules.h per element), all
// on one GPU, of one dtype, contiguous (core/ops/optimizer_steps.cpp checks them).
// m, v: Adam's moments, one per parameter; velocities: SGD's, one per parameter or none (no momentum).
void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
               const std::vector<Tensor>& v, const std::vector<double>& weight_decays, const AdamHyper& hyper,
               const AdamHyper* device_hyper = nullptr);
void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& velocities, const std::vector<double>& weight_decays,
              const SgdHyper& hyper);

// ---- Gradient clipping: the sum of the squares of every element of `tensors` (in double, the same
// on every run; one read back for all of them), and tensors[t] *= value for all (one launch).
// All on one GPU, contiguous, of one floating dtype.
double sum_of_squares(const std::vector<Tensor>& tensors);
void scale_all(const std::vector<Tensor>& tensors, double value);
// Clipping on the GPU, nothing read back: the norm (a float64 scalar on the device) is returned.
Tensor clip_by_norm(const std::vector<Tensor>& tensors, double max_norm);

// Waits for the device's queued work (for timing).
void synchronize(Device device);

}  // namespace ember::gpu
