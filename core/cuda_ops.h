// The CUDA backend's runtime interface: the runtime (synchronising, the copy stream, events), CUDA
// graphs, the caching allocator's capture warm-up, the backend's settings (cuDNN softmax, fused
// attention, TF32), and the cuBLAS GEMMs, with raw pointers, sizes and element strides only, so that
// the .cu files need neither Tensor nor fmt (they compile as C++17); cuda/ implements them. The
// kernels the ops run, element-wise and structural, are declared in core/kernels.h, once for every
// device. The GEMMs stay here: they are cuBLAS's entry under the products of core/kernels.h (linear,
// matmul), which cuda/blas*.cu call, and bench/gemm_peak.cpp times cuda::gemm_bf16_bare. Every
// function runs on `device`'s current stream (asynchronously: results are read back through a copy,
// which waits).
// Each entry point is declared once, as EMBER_CUDA_ENTRY(type, name, (parameters)), or
// EMBER_CUDA_DEFAULT(type, name, (parameters), {body}) for a setting that a build without CUDA
// answers with `body`. Here they are declarations; in a build without CUDA,
// core/cuda_ops_stubs.cpp includes this file with them defined as functions that raise
// "<name>: this build of Ember has no CUDA backend", so a new entry point is written only here.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#pragma once
#include <cstdint>

#ifndef EMBER_CUDA_ENTRY
#define EMBER_CUDA_ENTRY(type, name, params) type name params;
#define EMBER_CUDA_DEFAULT(type, name, params, body) type name params;
#endif

namespace ember::cuda {

constexpr int kMaxDims = 8;

// Element types, numbered like ember::Dtype (core/dtype.h; core/cuda_ops_stubs.cpp checks they agree).
// bfloat16 is stored as ember::BFloat16 and computed in float, each result rounded once, as on the CPU.
// float16 is a name only (core/dtype.h): no kernel takes it.
enum ScalarType : int { kFloat32 = 0, kFloat64 = 1, kInt32 = 2, kInt64 = 3, kBFloat16 = 4, kFloat16 = 5, kBool = 6 };

// The shape an element-wise launcher walks (row-major), at most kMaxDims dims (core/kernels.h's
// Strided operands, packed by cuda/elementwise_kernels.cu, and the row kernels' own).
struct Shape8 {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
};
// One operand of it: a pointer to element [0, ...], its type, and its stride (in elements) along
// each dim of the shape; 0 repeats the element (broadcasting).
struct Operand {
  void* data = nullptr;
  int dtype = kFloat32;
  int64_t stride[kMaxDims] = {};
};

// ---- Runtime (cuda/runtime.cu)
// Waits for everything queued on the device's stream.
EMBER_CUDA_ENTRY(void, synchronize, (int device))
// cudaMalloc calls made by the caching allocator so far.
EMBER_CUDA_ENTRY(int64_t, cudamalloc_count, (int device))

// ---- The copy stream (cuda/runtime.cu): a second stream per device, for host-to-device uploads
// that run while the device's stream (the compute stream, where every op runs) works. The two are
// ordered by events, on the GPU: the host never waits. `copy` names the stream: false the compute
// stream, true the copy stream.
EMBER_CUDA_ENTRY(void*, event_create, (int device))
EMBER_CUDA_ENTRY(void, event_destroy, (void* event))
// The event completes once the work queued on that stream so far is done.
EMBER_CUDA_ENTRY(void, event_record, (int device, bool copy, void* event))
// Work queued on that stream from now on starts once the event's work is done (on the GPU).
EMBER_CUDA_ENTRY(void, stream_wait_event, (int device, bool copy, void* event))
// Whether the event's work is done, without waiting (cudaEventQuery).
EMBER_CUDA_ENTRY(bool, event_query, (void* event))
// `bytes` of host memory to device memory at `dst`, on the copy stream, through pinned staging
// (the host memory may be reused at once; no wait).
EMBER_CUDA_ENTRY(void, upload_on_copy_stream, (int device, void* dst, const void* src, int64_t bytes))

// ---- CUDA graphs (cuda/graph.cu): the work given to the device's stream between begin and end is
// captured, not run, into a graph; replay runs it again, with the same pointers, as one launch.
// While capturing, the caching allocator makes no cudaMalloc and keeps the capture's blocks for
// the graph until graph_destroy. A synchronising call in between fails the capture.
EMBER_CUDA_ENTRY(void, graph_capture_begin, (int device))
// Ends the capture (also after an error, with `ok` false: nothing is kept, null is returned); the
// instantiated graph, to replay and destroy.
EMBER_CUDA_ENTRY(void*, graph_capture_end, (int device, bool ok))
EMBER_CUDA_ENTRY(void, graph_replay, (void* graph))
EMBER_CUDA_ENTRY(void, graph_destroy, (void* graph))
// Debugging: with launch_sync() on (EMBER_CUDA_SYNC=1, read at the first launch, or set_launch_sync)
// every kernel launch waits for its kernel, so that a kernel's fault is reported at its own launch
// (cuda/launch.h). Not inside a graph's capture: a captured launch runs, and is checked, at replay.
EMBER_CUDA_DEFAULT(void, set_launch_sync, (bool on), {})
EMBER_CUDA_DEFAULT(bool, launch_sync, (), { return false; })
// A capture's warm-up: allocator_record(device, true) notes the size of every block the caching
// allocator hands out until allocator_record(device, false); allocator_fill_recorded then makes its
// cache hold, at once, a block of every noted size (cudaMalloc for those it lacks), so that a
// capture of the same work finds its blocks whatever was allocated since the warm-up.
EMBER_CUDA_ENTRY(void, allocator_record, (int device, bool on))
EMBER_CUDA_ENTRY(void, allocator_fill_recorded, (int device))

// ---- The element-wise launchers the CUDA backend's own kernels use (cuda/elementwise_kernels.cu; the
// row kernels move and zero their operands with them, the bfloat16 GEMM converts them): over `shape`
// (at most kMaxDims dims), operands as Shape8 / Operand above. Plain declarations, not entry points:
// only cuda/ calls them, and the ops reach the element-wise kernels through core/kernels.h.
// dst = src converted to dst's type; dst = value; dst *= value (floating).
void copy(int device, const Shape8& shape, const Operand& dst, const Operand& src);
void fill(int device, const Shape8& shape, const Operand& dst, double value);
void scale(int device, const Shape8& shape, const Operand& dst, double value);

// ---- Softmax through cuDNN. The row kernels (reductions, softmax, the normalisations, cross-entropy)
// are in core/kernels.h; softmax's run through cuDNN (cuda/cudnn_softmax.cu) instead of their own row
// kernels when softmax_cudnn() is on (set_softmax_cudnn(true), or EMBER_SOFTMAX=cudnn).
EMBER_CUDA_DEFAULT(bool, cudnn_available, (), { return false; })  // built with cuDNN
EMBER_CUDA_DEFAULT(void, set_softmax_cudnn, (bool on), { if (on) no_cuda_backend("set_softmax_cudnn"); })
EMBER_CUDA_DEFAULT(bool, softmax_cudnn, (), { return false; })

// ---- Fused attention's settings (cuda/attention_kernels.cu: tiled, FlashAttention-2 style; its kernels are in
// core/kernels.h). Any T; head size D / heads up to attention_max_head_dim(). autograd/ops/attention.cpp runs them
// on a GPU when attention_fused() is on (the default; set_attention_fused(false) or EMBER_ATTENTION=composed
// turn it off, and the composed attention_reference runs): kernel::attention_plan says which.
EMBER_CUDA_DEFAULT(void, set_attention_fused, (bool on), {})
EMBER_CUDA_DEFAULT(bool, attention_fused, (), { return false; })
// Whether the fused kernels' mixed-precision path (bf16, or a bfloat16 qkv) runs its products on the tensor
// cores (WMMA, on a GPU of compute capability 8.0 or more): on unless EMBER_ATTENTION_TENSOR_CORES=off (or 0),
// or set_attention_tensor_cores(false); off, the CUDA-core kernels.
EMBER_CUDA_DEFAULT(void, set_attention_tensor_cores, (bool on), {})
EMBER_CUDA_DEFAULT(bool, attention_tensor_cores, (), { return false; })
// The largest head size the fused kernels take (128; 0 without CUDA).
EMBER_CUDA_DEFAULT(int64_t, attention_max_head_dim, (), { return 0; })

// ---- GEMM through cuBLAS (cuda/blas.cu), row-major like the CPU's cpu::gemm:
// C[b] (M x N, row stride ldc) = A[b] (M x K) @ B[b] (K x N) + beta * C[b] for b < batch, where
// A(i, k) = A[b * a_bs + i * a_rs + k * a_cs] (one of a_rs, a_cs must be 1; same for B).
EMBER_CUDA_ENTRY(void, gemm, (int device, bool float64, int64_t batch, int64_t M, int64_t N, int64_t K, const void* A,
                              int64_t a_rs, int64_t a_cs, int64_t a_bs, const void* B, int64_t b_rs, int64_t b_cs,
                              int64_t b_bs, double beta, void* C, int64_t ldc, int64_t c_bs))
// The same product with bfloat16 operands summed in float32 (mixed precision, core/precision.h): A and B
// float32, rounded to bfloat16 (nearest even) into device scratch by one conversion kernel each, then
// cublasGemmEx with CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F and a float32 C (tensor cores on a GPU).
EMBER_CUDA_ENTRY(void, gemm_bf16, (int device, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                                   int64_t a_rs, int64_t a_cs, int64_t a_bs, const float* B, int64_t b_rs,
                                   int64_t b_cs, int64_t b_bs, double beta, float* C, int64_t ldc, int64_t c_bs))
// The same product for the mixed-precision linear: A and B each float32 (rounded to bfloat16) or bfloat16
// (read exactly), summed in float32 from `bias` (N floats added to every row; may be null), into a C of
// float32 (ldc apart; compact when there is a bias) or bfloat16 (summed in a float32 scratch, each entry
// rounded once as it is stored: the CPU's cpu::gemm_bf16 with a bfloat16 C). Not batched.
EMBER_CUDA_ENTRY(void, gemm_bf16_typed, (int device, int64_t M, int64_t N, int64_t K, const void* A, int a_dtype,
                                         int64_t a_rs, int64_t a_cs, const void* B, int b_dtype, int64_t b_rs,
                                         int64_t b_cs, void* C, int c_dtype, int64_t ldc, const float* bias))
// The bare bfloat16 product for measuring the chip's matrix rate (cuda/gemm_rate.cu, bench/gemm_peak.cpp):
// C (M x N float32, compact) = A (M x K) @ B (K x N), A and B compact row-major bfloat16 on the device,
// summed in float32 by one cuBLAS call; no conversion or scratch.
EMBER_CUDA_ENTRY(void, gemm_bf16_bare, (int device, int64_t M, int64_t N, int64_t K, const void* A, const void* B,
                                        float* C))
// float32 GEMMs in TF32 (faster, about 1e-3 relative error) when on; off by default.
EMBER_CUDA_DEFAULT(void, set_allow_tf32, (bool allow), {})
EMBER_CUDA_DEFAULT(bool, allow_tf32, (), { return false; })
}  // namespace ember::cuda
