// The structural kernels, each declared once: one signature (raw pointers, sizes, results) that
// every backend implements, the CPU's in core/cpu/ and the GPU's in cuda/. An op allocates its
// outputs, then calls kernel::<name>(on, ...), which runs the implementation of the device `on`
// names; so an op has no device switch, and records one backward.
//
//     EMBER_KERNEL(void, my_norm_forward, (const On& on, const void* x, ...))
// declares cpu::my_norm_forward and cuda::my_norm_forward with that signature, and defines
// kernel::my_norm_forward(on, ...), which calls one of them. In a build without CUDA,
// core/cuda_ops_stubs.cpp includes this file with EMBER_KERNEL defining each cuda:: function as one
// that raises "<name>: this build of Ember has no CUDA backend" (never reached: no tensor can live
// on a GPU there). So a kernel is declared here and nowhere else.
// Element-wise kernels are not here: they come from the functor lists of core/unary_math.h. The
// GEMMs, copies, fills and the runtime are in core/cuda_ops.h (the CPU has its own, core/cpu/gemm.h).
// C++17 and free of Tensor and fmt, so that cuda/*.cu include it.
#pragma once
#include <cstdint>
#include <utility>

namespace ember {

// Where a kernel runs and the element type of its floating operands: every kernel's first parameter.
struct On {
  int device = -1;  // -1: the CPU; n >= 0: GPU n
  int dtype = 0;    // a Dtype (core/dtype.h) as a number: 0 float32, 1 float64, 4 bfloat16 (cuda::ScalarType's)
  bool cpu() const { return device < 0; }
  bool float64() const { return dtype == 1; }
};

}  // namespace ember

#ifndef EMBER_KERNEL
#define EMBER_KERNEL(type, name, params)                                                                 \
  namespace cpu {                                                                                        \
  type name params;                                                                                      \
  }                                                                                                      \
  namespace cuda {                                                                                       \
  type name params;                                                                                      \
  }                                                                                                      \
  namespace kernel {                                                                                     \
  template <typename... Args>                                                                            \
  type name(const On& on, Args&&... args) {                                                              \
    return on.cpu() ? cpu::name(on, std::forward<Args>(args)...) : cuda::name(on, std::forward<Args>(args)...); \
  }                                                                                                      \
  }
#endif

namespace ember {

// ---- Normalisations over the last dim of contiguous [rows, D] (core/ops/layer_norm.cpp;
// CPU: core/cpu/layer_norm.cpp, GPU: cuda/row_kernels.cu). weight and bias [D], each may be null.

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

// ---- Softmax and log-softmax over the middle dim of contiguous [outer, n, inner] (core/ops/softmax.cpp;
// CPU: core/cpu/softmax.cpp, GPU: cuda/row_kernels.cu, or cuDNN's (cuda/cudnn_softmax.cu) when
// cuda::softmax_cudnn() is on). y = softmax(x) over n (log-softmax when `log`); the backward gives dx
// from grad and the saved y: softmax dx = y * (g - sum(g * y)), log-softmax dx = g - e^y * sum(g).
// `scratch` is softmax_scratch(on, outer, n, inner, backward) elements of the data's dtype (the GPU's
// rows made contiguous when inner > 1: the operands moved to [outer, inner, n] and the result back).
EMBER_KERNEL(int64_t, softmax_scratch, (const On& on, int64_t outer, int64_t n, int64_t inner, bool backward))
EMBER_KERNEL(void, softmax_forward, (const On& on, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                                     bool log, void* scratch))
EMBER_KERNEL(void, softmax_backward, (const On& on, const void* grad, const void* y, void* dx, int64_t outer,
                                      int64_t n, int64_t inner, bool log, void* scratch))

// ---- Cross-entropy of contiguous logits [N, C] and int64 targets [N] (core/ops/cross_entropy.cpp;
// CPU: core/cpu/cross_entropy.cpp, GPU: cuda/row_kernels.cu), `count` rows counted (those whose target
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

// ---- Reductions over the middle dim of contiguous [outer, R, inner] (core/ops/reduce.cpp; CPU:
// core/cpu/reduce.cpp, GPU: cuda/row_kernels.cu): out [outer, inner] = the sum or the max over R
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

// ---- Embedding (core/ops/embedding.cpp; CPU: core/cpu/embedding.cpp, GPU: cuda/embedding_kernels.cu).
// Forward: out[i, :] = weight[ids[i], :] (weight [V, D] read through its strides, in elements), n ids
// (int64, on the device), out contiguous [n, D]. Backward: dweight[rows[k], :] += the sum over p in
// [starts[k], starts[k+1]) of grad[positions[p], :], in order of p (the buckets of the ids by row,
// core/ops/embedding.cpp's bucket_by_row): each row by one thread / block, no atomics, the same order
// of additions on every device. With `count` (device memory, for a CUDA graph's step) only the first
// *count of the nrows rows are added.
EMBER_KERNEL(void, embedding_forward, (const On& on, const void* weight, int64_t w_rs, int64_t w_cs,
                                       const int64_t* ids, int64_t n, int64_t D, void* out))
EMBER_KERNEL(void, embedding_backward, (const On& on, const void* grad, const int64_t* rows, const int64_t* starts,
                                        const int64_t* positions, int64_t nrows, int64_t D, void* dweight,
                                        const int64_t* count))

// ---- Multi-head self-attention, fused, full or over a band (core/ops/attention.cpp; CPU:
// core/cpu/attention.cpp, GPU: cuda/attention_kernels.cu, its layout and formulas in each file's opening
// comment). qkv contiguous [B, T, 3 D] (q | k | v, each `heads` heads of D / heads), key_padding_mask bool
// [B, T] (true = padding) or null; causal hides key j > query i; window, global: sliding-window attention's
// band (core/attention_band.h; window < 0: none). out [B, T, D] of qkv's dtype. bf16: mixed precision
// (core/precision.h) for a float32 qkv, the products' operands rounded to bfloat16; a bfloat16 qkv always
// runs so. A query that sees no key gets output 0 and sends no gradient (docs/attention.md).
// What each device keeps for the backward, and how it takes a bfloat16 qkv, differ: attention_plan says.
struct AttentionPlan {
  bool fused = true;              // the fused kernels run it (the GPU's: attention_fused() and a head size up to
                                  // attention_max_head_dim()); else the op composes attention_reference
  bool takes_bf16 = true;         // a bfloat16 qkv is read as it is; else the op widens it (in mixed precision)
  bool saves_probs = false;       // the backward reads the probabilities (the CPU's full attention), not out
                                  // and the stats
  int probs_dtype = 0;            // the probabilities' dtype (a Dtype number)
  bool probs_pair_major = false;  // [B, H, ceil(T / 2), T, 2], rows 2q and 2q + 1 side by side; else [B, H, T, T]
  int stats_dtype = 0;            // the stats' dtype
  int64_t stats_per_row = 1;      // 1: [B, H, T] log-sum-exps; 2: [B, H, T, 2] each row's softmax max and 1 / sum
  int64_t scratch = 0;            // float64 elements of the backward's scratch
};
EMBER_KERNEL(AttentionPlan, attention_plan, (const On& on, int64_t B, int64_t T, int64_t heads, int64_t D,
                                             int64_t window, bool bf16))
// Forward: out, stats (the plan's; null only when the plan saves the probabilities and nothing keeps them, a
// checkpoint's recompute cache: autograd/recompute_cache.h) and, when not null, the probabilities (the plan's
// layout; over a band the dense weights, 0 outside it).
EMBER_KERNEL(void, attention_forward, (const On& on, const void* qkv, const bool* key_padding_mask, int64_t B,
                                       int64_t T, int64_t heads, int64_t D, bool causal, int64_t window,
                                       int64_t global, bool bf16, void* out, void* stats, void* probs))
// The probabilities attention_forward keeps (the same bits), from the stats [B, H, T, 2] it returned: one
// product and one pass over each row. Only where the plan saves the probabilities (a checkpoint's recompute).
EMBER_KERNEL(void, attention_probs, (const On& on, const void* qkv, const bool* key_padding_mask, int64_t B,
                                     int64_t T, int64_t heads, int64_t D, bool causal, bool bf16, const void* stats,
                                     void* probs))
// Backward: grad_qkv [B, T, 3 D] (written whole) from grad_out [B, T, D] (contiguous) and what the forward
// kept: the probabilities when the plan saves them, else out and stats (the others may be null); `scratch`
// is the plan's float64 elements (null when 0).
EMBER_KERNEL(void, attention_backward, (const On& on, const void* qkv, const bool* key_padding_mask, int64_t B,
                                        int64_t T, int64_t heads, int64_t D, bool causal, int64_t window,
                                        int64_t global, bool bf16, const void* out, const void* stats,
                                        const void* probs, const void* grad_out, double* scratch, void* grad_qkv))

}  // namespace ember
