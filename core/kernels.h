// The kernels, each declared once: one signature (raw pointers, sizes, results) that every
// backend implements, the CPU's in core/cpu/ and the GPU's in cuda/. An op allocates its outputs,
// then calls kernel::<name>(on, ...), which runs the implementation of the device `on` names; so an
// op has no device switch, and records one backward.
//
//     EMBER_KERNEL(void, my_norm_forward, (const On& on, const void* x, ...))
// declares cpu::my_norm_forward and cuda::my_norm_forward with that signature, and defines
// kernel::my_norm_forward(on, ...), which calls one of them. A family of kernels made from the
// functors of core/unary_math.h (binary, unary_forward, ...) is one overload per functor:
// EMBER_KERNEL_OVERLOAD declares each one's cpu:: and cuda:: functions, and EMBER_KERNEL_CHOICE
// defines the family's kernel::<name> once. In a build without CUDA, core/cuda_ops_stubs.cpp
// includes this file with these macros defining each cuda:: function as one that raises "<name>:
// this build of Ember has no CUDA backend" (never reached: no tensor can live on a GPU there). So a
// kernel is declared here and nowhere else.
// The element-wise kernels (copies, fills, binary and unary math, where) take their operands as
// core/cpu/loops.h walks them (Strided: data, dtype, strides; broadcast as stride 0); the others
// take contiguous buffers and sizes. The raw GEMMs under the products and the runtime are in
// core/cuda_ops.h (the CPU has its own, core/cpu/gemm.h).
// C++17 and free of Tensor and fmt, so that cuda/*.cu include it.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/attention_args.h"
#include "core/shape.h"
#include "core/unary_math.h"
#include "core/update_rules.h"

namespace ember {

// Where a kernel runs and the element type of its floating operands: every kernel's first parameter.
struct On {
  int device = -1;  // -1: the CPU; n >= 0: GPU n
  int dtype = 0;    // a Dtype (core/dtype.h) as a number (0 float32, 1 float64, 4 bfloat16, ...: cuda::ScalarType's)
  bool cpu() const { return device < 0; }
  bool float64() const { return dtype == 1; }
};

}  // namespace ember

#ifndef EMBER_KERNEL
#define EMBER_KERNEL_OVERLOAD(type, name, params) \
  namespace cpu {                                 \
  type name params;                               \
  }                                               \
  namespace cuda {                                \
  type name params;                               \
  }
#define EMBER_KERNEL_CHOICE(type, name)                                                                  \
  namespace kernel {                                                                                     \
  template <typename... Args>                                                                            \
  type name(const On& on, Args&&... args) {                                                              \
    return on.cpu() ? cpu::name(on, std::forward<Args>(args)...) : cuda::name(on, std::forward<Args>(args)...); \
  }                                                                                                      \
  }
#define EMBER_KERNEL(type, name, params) EMBER_KERNEL_OVERLOAD(type, name, params) EMBER_KERNEL_CHOICE(type, name)
#endif

namespace ember {

// ---- Element-wise kernels over strided operands (autograd/ops/views.cpp: copies, fills, add_, mul_;
// autograd/ops/binary.cpp, autograd/ops/unary.cpp, autograd/ops/masking.cpp; CPU: core/cpu/elementwise.cpp,
// core/cpu/binary.cpp, core/cpu/unary.cpp on core/cpu/loops.h, GPU: cuda/elementwise_kernels.cu,
// cuda/unary_kernels.cu). Each walks `shape` (row-major), the output's; every operand is read (or
// written) over all of it through its own strides. bfloat16 is computed in float and each result
// rounded once (compute_type), on both devices. The ops have checked dtypes, devices and shapes;
// a GPU takes at most 8 dims and no float16.

// One operand: its element [0, ...], its dtype (a Dtype number, core/dtype.h) and its stride, in
// elements, along each dim of the shape; 0 along a dim it is broadcast over (the element repeats).
struct Strided {
  void* data = nullptr;
  int dtype = 0;
  std::vector<int64_t> strides;
};

// dst = src converted to dst's dtype; dst = value; dst += alpha * src (one dtype, not bool); dst *=
// value (floating). on.dtype is dst's.
EMBER_KERNEL(void, copy, (const On& on, const Shape& shape, const Strided& dst, const Strided& src))
EMBER_KERNEL(void, fill, (const On& on, const Shape& shape, const Strided& dst, double value))
EMBER_KERNEL(void, add_into, (const On& on, const Shape& shape, const Strided& dst, const Strided& src, double alpha))
EMBER_KERNEL(void, scale, (const On& on, const Shape& shape, const Strided& dst, double value))
// out = cond ? a : b (cond bool; a, b and out of one dtype, any: values are picked, not computed).
EMBER_KERNEL(void, select, (const On& on, const Shape& shape, const Strided& out, const Strided& cond,
                            const Strided& a, const Strided& b))

// out = f(a, b) for every binary functor of core/unary_math.h (EMBER_BINARY_OPS): a and b of one
// dtype (on.dtype), out of that dtype (arithmetic) or bool (comparisons and logical ops). Where
// add_widens(on) (the CPU), math::Add also takes a float32 a and a bfloat16 b, b widened as it is
// read into a float32 out: no float32 copy of b (the residual connection of a mixed-precision model).
#define EMBER_BINARY_KERNEL(name, Functor)                                                                  \
  EMBER_KERNEL_OVERLOAD(void, binary, (const On& on, const math::Functor& f, const Shape& shape, const Strided& out, \
                                       const Strided& a, const Strided& b))
EMBER_BINARY_OPS(EMBER_BINARY_KERNEL)
#undef EMBER_BINARY_KERNEL
EMBER_KERNEL_CHOICE(void, binary)
EMBER_KERNEL(bool, add_widens, (const On& on))

// y = f(x), and grad_x = grad * f'(x, y), for every unary functor of core/unary_math.h
// (EMBER_UNARY_OPS, EMBER_UNARY_PARAM_OPS): floating operands of on.dtype; y and grad_x contiguous,
// the others any strides (a GPU copies a strided one into a contiguous scratch first: one copy
// launch each). f.df reads x, y or neither (F::reads): the op hands a stand-in of the same shape for
// what it does not read, and the same Strided twice where one tensor stands for both.
#define EMBER_UNARY_KERNEL(name, Functor, ...)                                                              \
  EMBER_KERNEL_OVERLOAD(void, unary_forward, (const On& on, const math::Functor& f, const Shape& shape,    \
                                              const Strided& y, const Strided& x))                       \
  EMBER_KERNEL_OVERLOAD(void, unary_backward, (const On& on, const math::Functor& f, const Shape& shape,   \
                                               const Strided& grad_x, const Strided& grad, const Strided& x, \
                                               const Strided& y))
EMBER_UNARY_OPS(EMBER_UNARY_KERNEL)
EMBER_UNARY_PARAM_OPS(EMBER_UNARY_KERNEL)
#undef EMBER_UNARY_KERNEL
EMBER_KERNEL_CHOICE(void, unary_forward)
EMBER_KERNEL_CHOICE(void, unary_backward)

// ---- Normalisations over the last dim of contiguous [rows, D] (autograd/ops/layer_norm.cpp;
// CPU: core/cpu/layer_norm.cpp, GPU: cuda/norm_kernels.cu). weight and bias [D], each may be null.

// Layer norm. mean and rstd are float64 [rows]. Backward: dx, dweight, dbias may each be null (not
// wanted); `scratch` is layer_norm_scratch(on, rows, D) doubles, where dweight and dbias are summed
// by chunks of rows (each backend's own split, fixed: the same result for any thread count).
EMBER_KERNEL(void, layer_norm_forward, (const On& on, const void* x, const void* weight, const void* bias, void* y,
                                        double* mean, double* rstd, int64_t rows, int64_t D, double eps))
EMBER_KERNEL(int64_t, layer_norm_scratch, (const On& on, int64_t rows, int64_t D))
EMBER_KERNEL(void, layer_norm_backward, (const On& on, const void* grad, const void* x, const double* mean,
                                         const double* rstd, const void* weight, void* dx, void* dweight, void* dbias,
                                         int64_t rows, int64_t D, double* scratch))

// RMS norm (the op added in docs/adding-an-op.md): y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps)
// per row, float64 [rows]. Backward: dx and dweight (each null when not wanted; dweight zeroed by the
// op); `scratch` is rms_norm_scratch(rows, D) doubles: dweight summed by chunks of kRmsNormChunkRows
// rows, then the chunks in order, on both devices.
constexpr int64_t kRmsNormChunkRows = 64;
inline int64_t rms_norm_scratch(int64_t rows, int64_t D) { return (rows + kRmsNormChunkRows - 1) / kRmsNormChunkRows * D; }
EMBER_KERNEL(void, rms_norm_forward, (const On& on, const void* x, const void* weight, void* y, double* rstd,
                                      int64_t rows, int64_t D, double eps))
EMBER_KERNEL(void, rms_norm_backward, (const On& on, const void* grad, const void* x, const double* rstd,
                                       const void* weight, void* dx, void* dweight, int64_t rows, int64_t D,
                                       double* scratch))

// ---- Softmax and log-softmax over the middle dim of contiguous [outer, n, inner] (autograd/ops/softmax.cpp;
// CPU: core/cpu/softmax.cpp, GPU: cuda/softmax_kernels.cu, or cuDNN's (cuda/cudnn_softmax.cu) when
// cuda::softmax_cudnn() is on). y = softmax(x) over n (log-softmax when `log`); the backward gives dx
// from grad and the saved y: softmax dx = y * (g - sum(g * y)), log-softmax dx = g - e^y * sum(g).
// `scratch` is softmax_scratch(on, outer, n, inner, backward) elements of the data's dtype (the GPU's
// rows made contiguous when inner > 1: the operands moved to [outer, inner, n] and the result back).
EMBER_KERNEL(int64_t, softmax_scratch, (const On& on, int64_t outer, int64_t n, int64_t inner, bool backward))
EMBER_KERNEL(void, softmax_forward, (const On& on, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                                     bool log, void* scratch))
EMBER_KERNEL(void, softmax_backward, (const On& on, const void* grad, const void* y, void* dx, int64_t outer,
                                      int64_t n, int64_t inner, bool log, void* scratch))

// ---- Cross-entropy of contiguous logits [N, C] and int64 targets [N] (autograd/ops/cross_entropy.cpp;
// CPU: core/cpu/cross_entropy.cpp, GPU: cuda/cross_entropy_kernels.cu), `count` rows counted (those whose target
// is not ignore_index). Forward: per row the max m and s = sum(e^(x - m)) (the logits' type; 0 and 1
// on ignored rows), and loss (0-d, the logits' type) = the mean over counted rows of
// log(s) - (x[target] - m), 0 when count is 0; `scratch` is cross_entropy_scratch(on, N) doubles (the
// rows' losses, summed in a fixed order on each device). Backward: dlogits = (softmax - onehot) *
// grad[0] / count (grad: the loss's gradient as a float64 scalar on the device; all zeros when count
// is 0), 0 on ignored rows.
EMBER_KERNEL(int64_t, cross_entropy_scratch, (const On& on, int64_t N))
EMBER_KERNEL(void, cross_entropy_forward, (const On& on, const void* logits, const int64_t* targets, int64_t N,
                                           int64_t C, int64_t ignore_index, int64_t count, void* row_max,
                                           void* sum_exp, void* loss, double* scratch))
EMBER_KERNEL(void, cross_entropy_backward, (const On& on, const void* logits, const int64_t* targets,
                                            const void* row_max, const void* sum_exp, void* dlogits, int64_t N,
                                            int64_t C, int64_t ignore_index, const double* grad, int64_t count))

// ---- Reductions over the middle dim of contiguous [outer, R, inner] (autograd/ops/reduce.cpp; CPU:
// core/cpu/reduce.cpp, GPU: cuda/reduce_kernels.cu): out [outer, inner] = the sum or the max over R
// (each output summed by one thread / block in a fixed order; the GPU sums floating rows in double);
// argmax: out (int64) = the first index of the largest over n. `scratch` is reduce_scratch(on,
// outer, R, inner) elements of x's dtype (the GPU's rows made contiguous when inner > 1: moved to
// [outer, inner, R]). The CPU takes float32 and float64; the GPU int32 and int64 too.
enum class ReduceKind : int { Sum = 0, Max = 1 };
EMBER_KERNEL(int64_t, reduce_scratch, (const On& on, int64_t outer, int64_t R, int64_t inner))
EMBER_KERNEL(void, reduce, (const On& on, ReduceKind kind, const void* x, void* out, int64_t outer, int64_t R,
                            int64_t inner, void* scratch))
EMBER_KERNEL(void, argmax, (const On& on, const void* x, int64_t* out, int64_t outer, int64_t n, int64_t inner,
                            void* scratch))

// ---- Embedding (autograd/ops/embedding.cpp; CPU: core/cpu/embedding.cpp, GPU: cuda/embedding_kernels.cu).
// Forward: out[i, :] = weight[ids[i], :] (weight [V, D] read through its strides, in elements), n ids
// (int64, on the device), out contiguous [n, D]. Backward: dweight[rows[k], :] += the sum over p in
// [starts[k], starts[k+1]) of grad[positions[p], :], in order of p (the buckets of the ids by row,
// autograd/ops/embedding.cpp's bucket_by_row): each row by one thread / block, no atomics, the same order
// of additions on every device. With `count` (device memory, for a CUDA graph's step) only the first
// *count of the nrows rows are added.
EMBER_KERNEL(void, embedding_forward, (const On& on, const void* weight, int64_t w_rs, int64_t w_cs,
                                       const int64_t* ids, int64_t n, int64_t D, void* out))
EMBER_KERNEL(void, embedding_backward, (const On& on, const void* grad, const int64_t* rows, const int64_t* starts,
                                        const int64_t* positions, int64_t nrows, int64_t D, void* dweight,
                                        const int64_t* count))
// ---- Optimiser steps (autograd/ops/optimizer_steps.cpp; CPU: core/cpu/optimizer_steps.cpp, GPU:
// cuda/optim_kernels.cu): every tensor of a list updated in place by the per-element rules of
// core/update_rules.h, the very functions on both devices, so each element's result is the same on
// either and for any thread count (no sums: each element is updated on its own). On the GPU one fused
// launch updates up to 32 tensors (a model of up to 32 parameters: one launch).

// The tensors of one multi-tensor kernel, as host arrays of `count` entries, all of on.dtype and on
// on.device: params[t] (written), grads[t] (read) and up to two state buffers (state1[t],
// state2[t]) of sizes[t] contiguous elements each, and each tensor's weight decay; an array a kernel
// does not use may be null.
struct TensorList {
  int count = 0;
  void* const* params = nullptr;
  const void* const* grads = nullptr;
  void* const* state1 = nullptr;
  void* const* state2 = nullptr;
  const int64_t* sizes = nullptr;
  const double* weight_decays = nullptr;
};

// Adam / AdamW (AdamRule): state1 = the first moments (exp_avg), state2 = the second (exp_avg_sq).
// With `device_hyper` (memory of on's device, for a CUDA graph's step) the step's numbers are read
// there instead of `hyper`.
EMBER_KERNEL(void, adam_step, (const On& on, const TensorList& tensors, const AdamHyper& hyper,
                               const AdamHyper* device_hyper))
// SGD (SgdRule): state1 = the velocities (null without momentum); state2 unused.
EMBER_KERNEL(void, sgd_step, (const On& on, const TensorList& tensors, const SgdHyper& hyper))

// ---- Gradient clipping over a TensorList (autograd/ops/optimizer_steps.cpp: sum_of_squares,
// scale_all_, clip_by_norm_; CPU: core/cpu/grad_clipping.cpp, GPU: cuda/optim_kernels.cu; on a GPU
// one launch each for up to 32 tensors).
// sum_squares: the squares of every element of every grads[t], summed in double into
// sum_squares_partials(on, tensors) partial sums, each backend's fixed split (the CPU: 16 lanes per
// tensor; the GPU: one per 65,536-element chunk, a fixed tree within it), to be added up in order
// (by the caller, or by clip_scale): the same sum on every run and for any thread count.
EMBER_KERNEL(int64_t, sum_squares_partials, (const On& on, const TensorList& tensors))
EMBER_KERNEL(void, sum_squares, (const On& on, const TensorList& tensors, double* partials))
// scale_all: params[t][j] *= value for every tensor, in the tensors' type (as Tensor::mul_).
EMBER_KERNEL(void, scale_all, (const On& on, const TensorList& tensors, double value))
// Clipping with nothing read back: clip_scale adds the `count` partials up in order (from 0) and
// writes norm_scale[0] = the norm (the square root) and norm_scale[1] = the factor, max_norm /
// (norm + 1e-6) when norm > max_norm (and > 0), else 1; scale_all_by multiplies every params[t] by
// *factor. partials, norm_scale and factor are memory of on's device.
EMBER_KERNEL(void, clip_scale, (const On& on, const double* partials, int64_t count, double max_norm,
                                double* norm_scale))
EMBER_KERNEL(void, scale_all_by, (const On& on, const TensorList& tensors, const double* factor))

// ---- Dropout (autograd/ops/dropout.cpp; CPU: core/cpu/dropout.cpp, GPU: cuda/elementwise_kernels.cu)
// out[i] = in[i] * scale where (random_bits(seed, first + i) >> 11) >= threshold, else 0: core/random.h's
// counter-based hash, so the mask is a pure function of (seed, first + i), the same on either device
// and for any thread count. n contiguous elements of on.dtype (float32, float64, or bfloat16 scaled in
// float and rounded once). With `state` (memory of on's device: a CUDA graph's step, whose numbers
// change with each replay) the seed is state[0] and `first` counts from state[1].
EMBER_KERNEL(void, dropout_mask, (const On& on, const void* in, void* out, int64_t n, uint64_t seed, uint64_t first,
                                  uint64_t threshold, double scale, const uint64_t* state))

// ---- Random fills (autograd/ops/random.cpp: uniform_, normal_; CPU: core/cpu/random_fill.cpp, GPU:
// cuda/random_kernels.cu). data[i] = element i of a uniform [a, b) (normal = false) or normal (mean a,
// std b) draw whose range starts at `first`: core/random.h's uniform_element / normal_element, a pure
// function of (seed, first + i), so a seed gives the same numbers on either device and for any thread
// count. n contiguous elements of on.dtype (float32 or float64).
EMBER_KERNEL(void, random_fill, (const On& on, void* data, int64_t n, bool normal, uint64_t seed, uint64_t first,
                                 double a, double b))

// ---- Products, row-major, strides in elements (autograd/ops/linear.cpp, autograd/ops/matmul.cpp; CPU:
// core/cpu/products.cpp on core/cpu/gemm.h's GEMM, GPU: cuda/blas.cu on cuBLAS). float32 or float64.

// Linear: y [rows, N] = x [rows, K] W^T (+ bias [N] on every row; bias may be null), x, W [N, K] and
// y contiguous, W^T read in place (swapped strides). The CPU adds the bias to each tile of y as the
// tile is stored; the GPU copies it into y first (one copy launch) and the GEMM adds to it (beta 1).
// Backward: dx [rows, K] = g W and dW [N, K] = g^T x (g [rows, N] contiguous, g^T read in place), each
// null when not wanted; db (a sum over rows) is the op's.
EMBER_KERNEL(void, linear_forward, (const On& on, const void* x, const void* w, const void* bias, void* y,
                                    int64_t rows, int64_t K, int64_t N))
EMBER_KERNEL(void, linear_backward, (const On& on, const void* g, const void* x, const void* w, void* dx, void* dw,
                                     int64_t rows, int64_t K, int64_t N))

// The mixed-precision linear (core/precision.h, autograd/ops/linear.cpp; CPU: core/cpu/products.cpp, GPU:
// cuda/blas_bf16.cu): y [rows, N] bfloat16 = x W^T (+ bias, float32 [N]; may be null), the products of
// bfloat16-rounded operands summed in float32 and each entry rounded once (a GPU's sums start from the
// bias rounded to bfloat16: docs/precision.md). x (on.dtype) and W (w_dtype) are contiguous, float32 or
// bfloat16: the op rounds both to bfloat16 first where linear_bf16_rounds_first(on) (the CPU: it keeps
// those half-size copies for the backward, and its GEMM reads them in place), else hands them as they
// are (a GPU: its product copies each operand into a compact bfloat16 block anyway).
// Backward from g [rows, N] bfloat16: dx = g W (dx_dtype), dW = g^T x and db = the column sums of g
// (float32; the CPU's by blocks of 256 rows, then the blocks in order; a GPU's as sum(g.to(float32),
// {0}): the widened g and the reduction's scratch in `scratch`, linear_bf16_scratch(on, rows, N)
// floats); each null when not wanted.
EMBER_KERNEL(bool, linear_bf16_rounds_first, (const On& on))
EMBER_KERNEL(void, linear_forward_bf16, (const On& on, const void* x, const void* w, int w_dtype, const float* bias,
                                         void* y, int64_t rows, int64_t K, int64_t N))
EMBER_KERNEL(int64_t, linear_bf16_scratch, (const On& on, int64_t rows, int64_t N))
EMBER_KERNEL(void, linear_backward_bf16, (const On& on, const void* g, const void* x, const void* w, int w_dtype,
                                          void* dx, int dx_dtype, float* dw, float* db, int64_t rows, int64_t K,
                                          int64_t N, float* scratch))

// Matmul, a strided batch: C[b] (M x N, rows ldc apart) = A[b] (M x K) @ B[b] (K x N) for b < batch,
// A(i, k) = A[b a_bs + i a_rs + k a_cs], B(k, j) = B[b b_bs + k b_rs + j b_cs], C at C + b c_bs (a batch
// stride 0 repeats a broadcast operand); C is overwritten, never read. bf16 (float32 only): the operands
// rounded to bfloat16, the products summed in float32 (mixed precision, core/precision.h).
// Each device's GEMM reads operands by its own rules (matmul_reads): the op lays them out to suit.
EMBER_KERNEL(void, matmul, (const On& on, bool bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const void* A,
                            int64_t a_bs, int64_t a_rs, int64_t a_cs, const void* B, int64_t b_bs, int64_t b_rs,
                            int64_t b_cs, void* C, int64_t c_bs, int64_t ldc))
struct MatmulReads {
  // true (cuBLAS): an operand needs unit stride along its rows or its columns and a leading dimension
  // along the other (so A's batch read as extra rows of one tall A only when A is row-major); false
  // (the CPU packs any strides): any, though one with no unit stride is copied first (packing it
  // gathers element by element), and A's batch folds into its rows whenever the strides line up.
  bool leading_dim;
  // true (a cuBLAS call costs the host microseconds): operands whose batch dims do not merge into one
  // strided batch are made contiguous, so that one call does the whole product; false: the outer
  // batch dims are walked, one call per index.
  bool one_call;
};
EMBER_KERNEL(MatmulReads, matmul_reads, (const On& on))

// ---- Scaled dot-product attention, fused, full or over a band (autograd/ops/attention.cpp; CPU:
// core/cpu/attention.cpp, GPU: cuda/attention_kernels.cu, their layouts and formulas in each file's opening
// comment). The operands, the mask and the sizes: core/attention_args.h (q [B, H, T, Dh], k [B, H, S, Dh],
// v [B, H, S, Dv], out [B, H, T, Dv], each read or written through its strides). Every operand and an
// additive mask are of on.dtype. bf16: mixed precision (core/precision.h) for float32 operands, the products'
// operands rounded to bfloat16; bfloat16 operands always run so. A query that sees no key gets output 0 and
// sends no gradient (docs/attention.md).
// What each device keeps for the backward, and how it takes bfloat16 operands, differ: attention_plan says.
struct AttentionPlan {
  bool fused = true;              // the fused kernels run it (the GPU's: attention_fused() and head sizes up to
                                  // attention_max_head_dim()); else the op composes the reference
  bool takes_bf16 = true;         // bfloat16 operands are read as they are; else the op widens them (in mixed
                                  // precision)
  bool saves_probs = false;       // the backward reads the probabilities (the CPU's full attention), not out
                                  // and the stats
  int probs_dtype = 0;            // the probabilities' dtype (a Dtype number)
  bool probs_pair_major = false;  // [B, H, ceil(T / 2), S, 2], rows 2q and 2q + 1 side by side; else [B, H, T, S]
  int stats_dtype = 0;            // the stats' dtype
  int64_t stats_per_row = 1;      // 1: [B, H, T] log-sum-exps; 2: [B, H, T, 2] each row's softmax max and 1 / sum
  int64_t scratch = 0;            // float64 elements of the backward's scratch
};
EMBER_KERNEL(AttentionPlan, attention_plan, (const On& on, const AttentionArgs& args))
// Forward: out, stats (the plan's; null only when the plan saves the probabilities and nothing keeps them, a
// checkpoint's recompute cache: autograd/recompute_cache.h) and, when not null, the probabilities (the plan's
// layout, contiguous; over a band the dense weights, 0 outside it).
EMBER_KERNEL(void, attention_forward, (const On& on, const AttentionArgs& args, const AttentionOut& out, void* stats,
                                       void* probs))
// The probabilities attention_forward keeps (the same bits), from the stats [B, H, T, 2] it returned: one
// product and one pass over each row. Only where the plan saves the probabilities (a checkpoint's recompute).
EMBER_KERNEL(void, attention_probs, (const On& on, const AttentionArgs& args, const void* stats, void* probs))
// Backward: dq, dk, dv (each written whole) from grad_out [B, H, T, Dv] and what the forward kept: the
// probabilities when the plan saves them, else out and stats (the others may be null); `scratch` is the
// plan's float64 elements (null when 0).
EMBER_KERNEL(void, attention_backward, (const On& on, const AttentionArgs& args, const AttentionIn& out,
                                        const void* stats, const void* probs, const AttentionIn& grad_out,
                                        double* scratch, const AttentionOut& dq, const AttentionOut& dk,
                                        const AttentionOut& dv))

}  // namespace ember
