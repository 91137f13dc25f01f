// The warp-level side of the kernels for the CPU emulator: __shfl_*_sync, __ballot_sync,
// __any_sync, __all_sync, __syncwarp (the lanes of the mask meet, in lockstep, and their masks are
// checked: launch.cpp, warp_collective), warpSize, and the atomics. Included by cuda_runtime.h.
// Atomics need nothing more: the threads of a launch run one at a time on one OS thread, so a
// read-modify-write is atomic as written (and their order is the emulator's, one of the GPU's).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ember_emu {

enum class WarpOp { kSync, kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

// Waits (a fiber switch) until every lane of `mask` has reached this collective; returns the lane's
// result: the shuffled value's bits, the ballot, or 0.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width, const char* file, int line);

template <typename T>
T shuffle(WarpOp op, unsigned mask, T value, int param, int width, const char* file, int line) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_collective(op, mask, bits, param, width, file, line);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
inline int width_or_32() { return 32; }
inline int width_or_32(int width) { return width; }
inline unsigned mask_or_full() { return 0xFFFFFFFFu; }
inline unsigned mask_or_full(unsigned mask) { return mask; }

}  // namespace ember_emu

constexpr int warpSize = 32;

#define __shfl_sync(mask, value, lane, ...)                                                                 \
  ::ember_emu::shuffle(::ember_emu::WarpOp::kShfl, mask, value, lane, ::ember_emu::width_or_32(__VA_ARGS__), \
                       __FILE__, __LINE__)
#define __shfl_up_sync(mask, value, delta, ...)                                                                 \
  ::ember_emu::shuffle(::ember_emu::WarpOp::kShflUp, mask, value, delta, ::ember_emu::width_or_32(__VA_ARGS__), \
                       __FILE__, __LINE__)
#define __shfl_down_sync(mask, value, delta, ...)                                                                 \
  ::ember_emu::shuffle(::ember_emu::WarpOp::kShflDown, mask, value, delta, ::ember_emu::width_or_32(__VA_ARGS__), \
                       __FILE__, __LINE__)
#define __shfl_xor_sync(mask, value, lane_mask, ...)                                                                 \
  ::ember_emu::shuffle(::ember_emu::WarpOp::kShflXor, mask, value, lane_mask, ::ember_emu::width_or_32(__VA_ARGS__), \
                       __FILE__, __LINE__)
#define __ballot_sync(mask, predicate) \
  unsigned(::ember_emu::warp_collective(::ember_emu::WarpOp::kBallot, mask, (predicate) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, predicate) \
  int(::ember_emu::warp_collective(::ember_emu::WarpOp::kAny, mask, (predicate) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, predicate) \
  int(::ember_emu::warp_collective(::ember_emu::WarpOp::kAll, mask, (predicate) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __syncwarp(...) \
  ((void)::ember_emu::warp_collective(::ember_emu::WarpOp::kSync, ::ember_emu::mask_or_full(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))

template <typename T>
T atomicAdd(T* address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <typename T>
T atomicMax(T* address, T value) {
  T old = *address;
  if (value > old) *address = value;
  return old;
}
template <typename T>
T atomicMin(T* address, T value) {
  T old = *address;
  if (value < old) *address = value;
  return old;
}
template <typename T>
T atomicExch(T* address, T value) {
  T old = *address;
  *address = value;
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  T old = *address;
  if (old == compare) *address = value;
  return old;
}
