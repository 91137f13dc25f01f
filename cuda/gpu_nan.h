// The NaN an NVIDIA GPU writes, and the emulator writing the same one.
//
// IEEE 754 leaves the sign and payload of a NaN made by an invalid operation (sqrt(-1), log(-1), 0 / 0) and of
// an operation on a NaN to the machine. x86 returns the "default NaN" 0xFFC00000 (sign bit set) for an invalid
// operation and passes an input NaN's payload on; an NVIDIA GPU returns 0x7FFFFFFF from every float32
// instruction whose result is a NaN. Both are NaN, rounded to bfloat16 as 0xFFC0 and 0x7FFF: so sqrt of a
// negative bfloat16 has other bits on the GPU than on the CPU (the first H200 run: sqrt, rsqrt and log).
//
// The element-wise kernels pass each float result through gpu_float(). On a GPU it returns its argument (the
// hardware already made any NaN 0x7FFFFFFF); compiled for the CPU emulator (EMBER_CUDA_EMULATED, set by
// CMakeLists.txt for the translated kernels only), whose arithmetic is the CPU's, it turns a NaN into the GPU's,
// so that a test comparing the GPU's bits with the CPU's sees on the emulator what it sees on a GPU.
// float64 NaNs are left as the machine made them (not checked on a GPU).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace ember::cuda {

#if defined(EMBER_CUDA_EMULATED)
inline float gpu_float(float value) {
  if (value == value) return value;
  const uint32_t gpu_nan = 0x7FFFFFFFu;
  std::memcpy(&value, &gpu_nan, sizeof value);
  return value;
}
#else
EMBER_HD inline float gpu_float(float value) { return value; }
#endif
EMBER_HD inline double gpu_float(double value) { return value; }

}  // namespace ember::cuda
