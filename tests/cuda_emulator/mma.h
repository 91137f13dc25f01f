// A stand-in for CUDA's <mma.h> (nvcuda::wmma, the warp's tensor-core products) in the CPU emulator:
// the 16 x 16 x 16 shape with bfloat16 operands and a float accumulator, the one cuda/*.cu uses.
//
// On a GPU a fragment is spread over the 32 lanes of a warp in a layout CUDA leaves unspecified, so
// correct code touches it only through these calls (or element-wise the same way on every element).
// The emulator spreads it as a GPU may, so that code which reads an element by its position fails
// here too: each lane holds 8 of the tile's 256 elements (num_elements), in the order of PTX's
// documented mma.m16n8k16 layout (sm_80; the n = 16 tile as two n = 8 halves), not row-major: lane l,
// with g = l / 4 and q = l % 4, holds in element i
//   matrix_a [M][K]:    row g + 8 ((i / 2) % 2),     col 2q + i % 2 + 8 (i / 4)
//   matrix_b [K][N]:    row 2q + i % 2 + 8 ((i / 2) % 2), col g + 8 (i / 4)
//   accumulator [M][N]: row g + 8 ((i / 2) % 2),     col 2q + i % 2 + 8 (i / 4)
// (fragment_position below; tests/cuda_emulator/checks/wmma_layout_test.cpp shows that code assuming a
// row-major fragment gets another result). Each call is a warp collective, as on a GPU: the 32 lanes
// of the warp meet there (a __syncwarp at the caller's line, so lanes that reach different calls, or a
// lane that never does, are reported like any diverged collective: launch.cpp). A load or store moves
// each lane's own elements; mma_sync reads the operands of the whole warp (each lane publishes its
// operands, the warp meets, each lane computes its own 8 results, the warp meets again before any
// lane writes d, which may be c). It sums in float, k in order (a bfloat16 product is exact in
// float32; a tensor core adds them in its own order). The operands' rules of the real calls are
// checked, not left undefined: the pointer 32-byte aligned, ldm a multiple of 16 bytes (8 bfloat16,
// 4 floats).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <source_location>
#include <type_traits>

#include "cuda_bf16.h"
#include "warp.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator's WMMA has the 16 x 16 x 16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : std::is_same_v<T, __nv_bfloat16>,
                "the emulator's WMMA multiplies __nv_bfloat16 operands into a float accumulator");
  static constexpr int num_elements = 8;  // this lane's share of the 16 x 16 tile (see the top)
  T x[num_elements];
};

namespace emulated {

struct Position {
  int row, col;
};

// Where element i of lane `lane`'s fragment sits in the tile (the layout at the top of this file).
template <typename Use>
constexpr Position fragment_position(int lane, int i) {
  const int g = lane / 4, q = lane % 4;
  if constexpr (std::is_same_v<Use, matrix_b>) return {2 * q + i % 2 + 8 * ((i / 2) % 2), g + 8 * (i / 4)};
  return {g + 8 * ((i / 2) % 2), 2 * q + i % 2 + 8 * (i / 4)};
}

// The inverse: which lane holds tile element (row, col), and at which index.
struct Holder {
  unsigned char lane[16][16], index[16][16];
};
template <typename Use>
constexpr Holder holders() {
  Holder h{};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i) {
      const Position p = fragment_position<Use>(lane, i);
      h.lane[p.row][p.col] = static_cast<unsigned char>(lane);
      h.index[p.row][p.col] = static_cast<unsigned char>(i);
    }
  return h;
}

// The calling thread's warp in its block, and its lane in the warp.
inline int linear_thread() { return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }
inline int lane_id() { return linear_thread() % 32; }

// The warp meets at the caller's line, as at any warp collective.
inline void meet(const std::source_location& where) {
  (void)::ember_emu::warp_collective(::ember_emu::WarpOp::kSync, 0xFFFFFFFFu, 0, 0, 32, where.file_name(),
                                     int(where.line()));
}

inline void check_operand(const void* p, unsigned ldm, size_t element_bytes, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * element_bytes) % 16 != 0) {
    std::fprintf(stderr,
                 "CUDA emulator: a WMMA load or store at %s:%u with pointer %p and ldm %u: the pointer must be "
                 "32-byte aligned and ldm a multiple of 16 bytes\n",
                 where.file_name(), unsigned(where.line()), p, ldm);
    std::abort();
  }
}

// mma_sync's exchange: the operands each lane of each warp of the running block published. The
// threads of a launch run one at a time on one host thread (launch.cpp), one block at a time.
struct Published {
  const void* a;
  const void* b;
};
inline thread_local Published published[32][32];  // [warp][lane]: at most 1024 threads a block

}  // namespace emulated

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value,
                   const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  for (T& e : f.x) e = value;
}

// matrix_a or matrix_b: the layout is the fragment's (row_major: element (r, c) at p[r * ldm + c];
// col_major: at p[c * ldm + r]).
template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm,
                      const std::source_location& where = std::source_location::current()) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "a matrix_a or matrix_b fragment names its layout");
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(__nv_bfloat16), where);
  const int lane = emulated::lane_id();
  for (int i = 0; i < 8; ++i) {
    const auto [r, c] = emulated::fragment_position<Use>(lane, i);
    f.x[i] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
  }
}

// The accumulator: the layout is the call's.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout,
                             const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(float), where);
  const int lane = emulated::lane_id();
  for (int i = 0; i < 8; ++i) {
    const auto [r, c] = emulated::fragment_position<accumulator>(lane, i);
    f.x[i] = layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
  }
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout, const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(float), where);
  const int lane = emulated::lane_id();
  for (int i = 0; i < 8; ++i) {
    const auto [r, c] = emulated::fragment_position<accumulator>(lane, i);
    (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[i];
  }
}

// d = a b + c (d may be c).
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c,
              const std::source_location& where = std::source_location::current()) {
  using A = fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>;
  using B = fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>;
  static constexpr emulated::Holder a_holders = emulated::holders<matrix_a>();
  static constexpr emulated::Holder b_holders = emulated::holders<matrix_b>();
  const int thread = emulated::linear_thread(), lane = thread % 32;
  emulated::Published* warp = emulated::published[thread / 32];
  warp[lane] = {&a, &b};
  emulated::meet(where);  // every lane's operands published
  float out[8];
  for (int i = 0; i < 8; ++i) {
    const auto [m, n] = emulated::fragment_position<accumulator>(lane, i);
    float sum = c.x[i];
    for (int k = 0; k < 16; ++k) {
      const A& a_holder = *static_cast<const A*>(warp[a_holders.lane[m][k]].a);
      const B& b_holder = *static_cast<const B*>(warp[b_holders.lane[k][n]].b);
      sum += float(a_holder.x[a_holders.index[m][k]]) * float(b_holder.x[b_holders.index[k][n]]);
    }
    out[i] = sum;
  }
  emulated::meet(where);  // every lane has read the others' operands: d (maybe a lane's c) can change
  for (int i = 0; i < 8; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
