// Element-wise kernels over strided, broadcast operands: copy (with type conversion), fill,
// in-place add and scale, binary arithmetic and comparisons, select (where / masked_fill): the GPU's
// side of core/kernels.h's element-wise kernels (kernel::copy, kernel::binary, ...), and dropout
// (kernel::dropout_mask). The copy, fill and scale launchers are also the backend's own (core/cuda_ops.h:
// the row kernels and the bfloat16 GEMM call them).
// bfloat16 (ember::BFloat16, host and device) is computed in float and each result rounded once
// (compute_type<T>), the CPU's rule, so both devices give the same bits.
// Each thread takes linear indices of the output shape (grid-stride), turns one into a multi-index
// and each operand's offset from its own strides (0 = broadcast), up to 8 dims; dims that every
// operand walks as one are merged first (coalesce), so a contiguous tensor is one flat loop.
// The arithmetic is the functors of core/unary_math.h and the dropout hash core/random.h, both
// EMBER_HD, so the CPU and the GPU compute the very same formulas.
// Kernel parameters: the shape and operands are `const __grid_constant__`, so that offset_of reads
// their arrays in place from the parameter space; without it, taking their address made every
// thread copy them to local memory first (152-392 bytes per thread; tests/ptxas_check.py checks).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/merge_dims.h"
#include "core/random.h"
#include "core/unary_math.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

// The offset (in elements) of linear index i of `shape` in an operand with `stride`. One dim (a
// contiguous tensor, after coalesce()) needs no division; more take a division per dim.
__device__ __forceinline__ int64_t offset_of(const Shape8& shape, const int64_t* stride, int64_t i) {
  if (shape.ndim == 1) return i * stride[0];
  int64_t offset = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    int64_t size = shape.size[d];
    int64_t index = i % size;
    i /= size;
    offset += index * stride[d];
  }
  return offset;
}

// Before a launch (host side): the dims every operand walks as one merged, size-1 dims dropped
// (core/merge_dims.h), so same-shaped contiguous operands walk a single dim: a 64-bit division per
// dim and operand for every element costs several times the memory traffic of a small element-wise
// kernel on a GPU.
void coalesce(Shape8& shape, std::initializer_list<Operand*> operands) {
  int64_t* strides[4];  // at most 4 operands (select: out, cond, a, b)
  int count = 0;
  for (Operand* op : operands) strides[count++] = op->stride;
  shape.ndim = merge_dims(shape.ndim, shape.size, strides, count);
}

int64_t numel(const Shape8& shape) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; ++d) n *= shape.size[d];
  return n;
}

// dst = src converted to D (static_cast), elementwise over `shape`; a grid-stride loop, a thread per element.
template <typename D, typename S>
__global__ void copy_kernel(const __grid_constant__ Shape8 shape, int64_t n, D* dst, const __grid_constant__ Operand d,
                            const S* src, const __grid_constant__ Operand s) {
  EMBER_CUDA_LOOP(i, n) dst[offset_of(shape, d.stride, i)] = static_cast<D>(src[offset_of(shape, s.stride, i)]);
}

// dst = value at every element of `shape`; a grid-stride loop, a thread per element.
template <typename T>
__global__ void fill_kernel(const __grid_constant__ Shape8 shape, int64_t n, T* dst, const __grid_constant__ Operand d,
                            T value) {
  EMBER_CUDA_LOOP(i, n) dst[offset_of(shape, d.stride, i)] = value;
}

// dst += alpha * src (in compute_type<T>), src broadcast by its strides; a grid-stride loop, a thread per
// element.
template <typename T, typename C = compute_type<T>>
__global__ void add_into_kernel(const __grid_constant__ Shape8 shape, int64_t n, T* dst,
                                const __grid_constant__ Operand d, const T* src, const __grid_constant__ Operand s,
                                C alpha) {
  EMBER_CUDA_LOOP(i, n) {
    T& out = dst[offset_of(shape, d.stride, i)];
    out = T(C(out) + alpha * C(src[offset_of(shape, s.stride, i)]));
  }
}

// dst *= value (in compute_type<T>); a grid-stride loop, a thread per element.
template <typename T, typename C = compute_type<T>>
__global__ void scale_kernel(const __grid_constant__ Shape8 shape, int64_t n, T* dst, const __grid_constant__ Operand d,
                             C value) {
  EMBER_CUDA_LOOP(i, n) {
    T& out = dst[offset_of(shape, d.stride, i)];
    out = T(C(out) * value);
  }
}

// out = f(a, b) (an arithmetic or comparison functor, computed in compute_type<T>, stored as R); a
// grid-stride loop, a thread per element.
template <typename F, typename T, typename R, typename C = compute_type<T>>
__global__ void binary_kernel(F f, const __grid_constant__ Shape8 shape, int64_t n, R* out,
                              const __grid_constant__ Operand o, const T* a, const __grid_constant__ Operand oa,
                              const T* b, const __grid_constant__ Operand ob) {
  EMBER_CUDA_LOOP(i, n) {
    out[offset_of(shape, o.stride, i)] =
        R(f.f(C(a[offset_of(shape, oa.stride, i)]), C(b[offset_of(shape, ob.stride, i)])));
  }
}

// out = cond ? a : b (where / masked_fill), each operand by its own strides; a grid-stride loop, a
// thread per element.
template <typename T>
__global__ void select_kernel(const __grid_constant__ Shape8 shape, int64_t n, T* out,
                              const __grid_constant__ Operand o, const bool* cond, const __grid_constant__ Operand oc,
                              const T* a, const __grid_constant__ Operand oa, const T* b,
                              const __grid_constant__ Operand ob) {
  EMBER_CUDA_LOOP(i, n) {
    out[offset_of(shape, o.stride, i)] =
        cond[offset_of(shape, oc.stride, i)] ? a[offset_of(shape, oa.stride, i)] : b[offset_of(shape, ob.stride, i)];
  }
}

// out[i] = in[i] * scale where random_bits(seed, first + i) (core/random.h, counter-based, EMBER_HD) keeps
// element i, else 0; contiguous operands, a grid-stride loop, a thread per element.
template <typename T, typename C = compute_type<T>>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, uint64_t seed, uint64_t first, uint64_t threshold,
                               C scale, const uint64_t* state) {
  if (state != nullptr) {  // a CUDA graph's step: the seed and the step's first index are read here
    seed = state[0];
    first += state[1];
  }
  EMBER_CUDA_LOOP(i, n) {
    bool keep = (random_bits(seed, first + uint64_t(i)) >> 11) >= threshold;
    out[i] = T(keep ? C(in[i]) * scale : C(0));
  }
}

// out = f(a, b) over `shape`: the kernel for a's element type; the result is bool for a comparison.
template <typename F>
void launch_binary(const F& f, int device, const Shape8& shape_in, const Operand& out_in, const Operand& a_in,
                   const Operand& b_in) {
  Shape8 shape = shape_in;
  Operand out = out_in, a = a_in, b = b_in;
  coalesce(shape, {&out, &a, &b});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_storable(a.dtype, "binary op: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    using R = typename std::conditional<math::is_comparison<F>, bool, T>::type;
    // NOTE: the op (autograd/ops/binary.cpp) refuses arithmetic on bool; this only keeps it from being compiled.
    if constexpr (std::is_same<T, bool>::value && !math::is_comparison<F>) {
      raise_message("arithmetic on bool tensors is not defined");
    } else {
      binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, shape, n, static_cast<R*>(out.data), out,
                                                            static_cast<const T*>(a.data), a,
                                                            static_cast<const T*>(b.data), b);
    }
  });
  EMBER_CUDA_LAUNCHED("binary_kernel");
}

void launch_add_into(int device, const Shape8& shape_in, const Operand& dst_in, const Operand& src_in, double alpha) {
  Shape8 shape = shape_in;
  Operand dst = dst_in, src = src_in;
  coalesce(shape, {&dst, &src});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_storable(dst.dtype, "add_: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      raise_message("add_: not defined for bool tensors");
    } else {
      add_into_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, n, static_cast<T*>(dst.data), dst,
                                                              static_cast<const T*>(src.data), src,
                                                              static_cast<compute_type<T>>(alpha));
    }
  });
  EMBER_CUDA_LAUNCHED("add_into_kernel");
}

void launch_select(int device, const Shape8& shape_in, const Operand& out_in, const Operand& cond_in,
                   const Operand& a_in, const Operand& b_in) {
  Shape8 shape = shape_in;
  Operand out = out_in, cond = cond_in, a = a_in, b = b_in;
  coalesce(shape, {&out, &cond, &a, &b});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_storable(out.dtype, "where: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    select_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, n, static_cast<T*>(out.data), out,
                                                          static_cast<const bool*>(cond.data), cond,
                                                          static_cast<const T*>(a.data), a,
                                                          static_cast<const T*>(b.data), b);
  });
  EMBER_CUDA_LAUNCHED("select_kernel");
}

// core/kernels.h's loop shape and Strided operands as the launchers take them (fixed arrays, passed as
// kernel parameters): at most kMaxDims dims, and no float16, each refused naming the op.
Shape8 shape8(const Shape& shape, const char* op) {
  if (shape.size() > size_t(kMaxDims)) {
    std::string message = std::string(op) + ": CUDA kernels take at most " + std::to_string(kMaxDims) +
                          " dims, got shape [";
    for (size_t d = 0; d < shape.size(); ++d) message += (d > 0 ? ", " : "") + std::to_string(shape[d]);
    raise_message((message + "]").c_str());
  }
  Shape8 s;
  s.ndim = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) s.size[d] = shape[d];
  return s;
}
Operand operand(const Strided& t, const char* op) {
  if (t.dtype == kFloat16) raise_message((std::string(op) + ": dtype float16 has no CUDA kernels yet").c_str());
  Operand o;
  o.data = t.data;
  o.dtype = t.dtype;
  for (size_t d = 0; d < t.strides.size() && d < size_t(kMaxDims); ++d) o.stride[d] = t.strides[d];
  return o;
}

}  // namespace

// ---- The launchers the CUDA backend's own kernels use (core/cuda_ops.h)

void copy(int device, const Shape8& shape_in, const Operand& dst_in, const Operand& src_in) {
  Shape8 shape = shape_in;
  Operand dst = dst_in, src = src_in;
  coalesce(shape, {&dst, &src});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_storable(dst.dtype, "copy: unsupported destination dtype on CUDA", [&](auto d_tag) {
    using D = decltype(d_tag);
    dispatch_storable(src.dtype, "copy: unsupported source dtype on CUDA", [&](auto s_tag) {
      using S = decltype(s_tag);
      copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, n, static_cast<D*>(dst.data), dst,
                                                          static_cast<const S*>(src.data), src);
    });
  });
  EMBER_CUDA_LAUNCHED("copy_kernel");
}

void fill(int device, const Shape8& shape_in, const Operand& dst_in, double value) {
  Shape8 shape = shape_in;
  Operand dst = dst_in;
  coalesce(shape, {&dst});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_storable(dst.dtype, "fill_: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, n, static_cast<T*>(dst.data), dst, static_cast<T>(value));
  });
  EMBER_CUDA_LAUNCHED("fill_kernel");
}

void scale(int device, const Shape8& shape_in, const Operand& dst_in, double value) {
  Shape8 shape = shape_in;
  Operand dst = dst_in;
  coalesce(shape, {&dst});
  int64_t n = numel(shape);
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  const char* not_floating = "mul_: expected a floating tensor (float32, float64 or bfloat16) on CUDA";
  dispatch_real(dst.dtype, not_floating, [&](auto tag) {
    using T = decltype(tag);  // value in compute_type<T>: float for float32 and bfloat16
    scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shape, n, static_cast<T*>(dst.data), dst,
                                                         compute_type<T>(value));
  });
  EMBER_CUDA_LAUNCHED("scale_kernel");
}

// ---- core/kernels.h's element-wise kernels: the operands packed, then the launchers above

void copy(const On& on, const Shape& shape, const Strided& dst, const Strided& src) {
  copy(on.device, shape8(shape, "copy"), operand(dst, "copy"), operand(src, "copy"));
}

void fill(const On& on, const Shape& shape, const Strided& dst, double value) {
  fill(on.device, shape8(shape, "fill_"), operand(dst, "fill_"), value);
}

void add_into(const On& on, const Shape& shape, const Strided& dst, const Strided& src, double alpha) {
  launch_add_into(on.device, shape8(shape, "add_"), operand(dst, "add_"), operand(src, "add_"), alpha);
}

void scale(const On& on, const Shape& shape, const Strided& dst, double value) {
  scale(on.device, shape8(shape, "mul_"), operand(dst, "mul_"), value);
}

void select(const On& on, const Shape& shape, const Strided& out, const Strided& cond, const Strided& a,
            const Strided& b) {
  launch_select(on.device, shape8(shape, "where"), operand(out, "where"), operand(cond, "where"),
                operand(a, "where"), operand(b, "where"));
}

#define EMBER_DEFINE_CUDA_BINARY(name, Functor)                                                                   \
  void binary(const On& on, const math::Functor& f, const Shape& shape, const Strided& out, const Strided& a,     \
              const Strided& b) {                                                                                 \
    launch_binary(f, on.device, shape8(shape, #name), operand(out, #name), operand(a, #name), operand(b, #name)); \
  }
EMBER_BINARY_OPS(EMBER_DEFINE_CUDA_BINARY)
#undef EMBER_DEFINE_CUDA_BINARY

// The GPU's kernels take a and b of one dtype: the op widens a bfloat16 operand of a float32 sum first.
bool add_widens(const On&) { return false; }

void dropout_mask(const On& on, const void* in, void* out, int64_t n, uint64_t seed, uint64_t first,
                  uint64_t threshold, double scale, const uint64_t* state) {
  if (n == 0) return;
  cudaStream_t stream = use_device(on.device);
  const char* not_floating = "dropout: expected a floating tensor (float32, float64 or bfloat16) on CUDA";
  dispatch_real(on.dtype, not_floating, [&](auto tag) {
    using T = decltype(tag);  // scale in compute_type<T>: float for float32 and bfloat16
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), n, seed,
                                                           first, threshold, compute_type<T>(scale), state);
  });
  EMBER_CUDA_LAUNCHED("dropout_kernel");
}

}  // namespace ember::cuda
