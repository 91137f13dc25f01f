// A stand-in for CUDA's <cuda_bf16.h> in the CPU emulator: the __nv_bfloat16 type (the top 16 bits of a
// float32) and the conversions cuda/*.cu use, with NVIDIA's semantics: __float2bfloat16_rn rounds to
// nearest even and keeps NaN a NaN (core/bfloat16.h implements the same rounding); __bfloat162float
// is exact. Like the real header's type, it converts to float implicitly.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "cuda_runtime.h"

struct __nv_bfloat16 {
  unsigned short __x = 0;
  __nv_bfloat16() = default;
  __host__ __device__ operator float() const { return ember::BFloat16::to_float(__x); }
};

__host__ __device__ inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  __nv_bfloat16 out;
  out.__x = ember::BFloat16::round_to_bits(value);
  return out;
}
__host__ __device__ inline float __bfloat162float(__nv_bfloat16 value) { return ember::BFloat16::to_float(value.__x); }
