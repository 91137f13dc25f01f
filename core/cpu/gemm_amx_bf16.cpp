// The bfloat16 GEMM micro-kernel on Intel AMX: tile registers of 16 rows x 64 bytes and `tdpbf16ps`,
// which multiplies a 16 x 32 bfloat16 tile of A by a 32 x 16 tile of B into a 16 x 16 float32 tile of
// C: 16,384 multiply-adds in one instruction.
//
// Eight tiles make a 32 x 32 block of C from K in chunks of 32:
//   tmm0 = C[0:16, 0:16]   tmm1 = C[0:16, 16:32]     tmm4 = A[0:16, chunk]   tmm6 = B[chunk, 0:16]
//   tmm2 = C[16:32, 0:16]  tmm3 = C[16:32, 16:32]    tmm5 = A[16:32, chunk]  tmm7 = B[chunk, 16:32]
// Packed layouts (uint16 bfloat16 bits; K padded with zeros to a multiple of 32, kp long):
//   A micro-panel (32 rows):  row r's k contiguous      a_panel[r * kp + k]
//                             (a tile row is 32 k = 64 bytes; the tile's row stride is kp * 2 bytes)
//   B micro-panel (width w):  pair p = (k 2p, 2p + 1)   b_panel[2 * (p * w + j) + (k & 1)]
//                             (AMX's "VNNI" layout: a tile row is one pair of 16 columns; stride w * 4)
// NOTE: this machine's CPU (an AMD EPYC) has no AMX, so the tile instructions cannot run here. The
// kernel is written once over a `Tiles` policy: HardwareTiles issues the instructions (picked by
// gemm_bf16 when CPUID and the OS allow AMX), SoftwareTiles does what they do in plain C++ ("amx_emulated",
// always available), and the tests run the kernel's packing, chunking and edge handling through it
// against the reference GEMM.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"

namespace ember::cpu::detail {
namespace {

constexpr int kMR = 32, kNR = 32, kChunk = 32;  // C block 32 x 32; K per tile chunk

// Packing. Portable loops: the rounding (round to nearest even, NaN kept) is BFloat16's.
inline uint16_t bits_of(float x) { return BFloat16::round_to_bits(x); }
inline uint16_t bits_of(BFloat16 x) { return x.bits; }

template <typename S>
void pack_a(const S* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, uint16_t* out) {
  const int64_t kp = round_up(kc, kChunk);
  for (int64_t i0 = 0; i0 < m; i0 += kMR) {
    for (int64_t r = 0; r < kMR; ++r) {
      uint16_t* row = out + r * kp;
      if (i0 + r >= m) {
        std::fill(row, row + kp, uint16_t(0));
        continue;
      }
      const S* source = A + (i0 + r) * a_rs;
      for (int64_t k = 0; k < kc; ++k) row[k] = bits_of(source[k * a_cs]);
      std::fill(row + kc, row + kp, uint16_t(0));
    }
    out += kMR * kp;
  }
}

template <typename S>
void pack_b(const S* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, uint16_t* out) {
  const int64_t kp = round_up(kc, kChunk);
  for (int64_t j0 = 0; j0 < n; j0 += kNR) {
    const int64_t cols = std::min<int64_t>(kNR, n - j0);
    const int64_t width = round_up(cols, 16);
    uint16_t* panel = out + j0 * kp;
    for (int64_t k = 0; k < kp; ++k)
      for (int64_t j = 0; j < width; ++j)
        panel[2 * ((k / 2) * width + j) + (k & 1)] = j < cols && k < kc ? bits_of(B[k * b_rs + (j0 + j) * b_cs]) : 0;
  }
}

// The tile instructions in plain C++: eight tiles of 16 rows x 64 bytes, per thread.
struct SoftwareTiles {
  using Tile = std::array<std::array<unsigned char, 64>, 16>;
  static Tile& tile(int t) {
    thread_local std::array<Tile, 8> tiles;
    return tiles[size_t(t)];
  }
  static void configure() {}
  template <int T> static void zero() { tile(T) = {}; }
  template <int T> static void load(const void* base, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(tile(T)[r].data(), static_cast<const char*>(base) + r * stride, 64);
  }
  template <int T> static void store(void* base, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(base) + r * stride, tile(T)[r].data(), 64);
  }
  // C[m, n] += sum over the 16 pairs p of A[m, 2p] B[p, 2n] + A[m, 2p + 1] B[p, 2n + 1], in float.
  template <int C, int A, int B> static void dot() {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float sum;
        std::memcpy(&sum, tile(C)[m].data() + 4 * n, 4);
        for (int p = 0; p < 16; ++p) {
          uint16_t a[2], b[2];
          std::memcpy(a, tile(A)[m].data() + 4 * p, 4);
          std::memcpy(b, tile(B)[p].data() + 4 * n, 4);
          sum += BFloat16::to_float(a[0]) * BFloat16::to_float(b[0]) + BFloat16::to_float(a[1]) * BFloat16::to_float(b[1]);
        }
        std::memcpy(tile(C)[m].data() + 4 * n, &sum, 4);
      }
  }
};

// C[0:m_rows, 0:n_cols] = alpha (A panel x B panel) + beta C, one 32 x 32 block.
template <typename Tiles>
void tile_block(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t c_rs, int m_rows, int n_cols,
                float alpha, float beta) {
  Tiles::configure();
  const int64_t kp = round_up(kc, kChunk);
  const int64_t width = round_up(n_cols, 16);  // the B panel's width: 16 or 32
  const bool right = n_cols > 16;              // C[:, 16:32] exists
  Tiles::template zero<0>();
  Tiles::template zero<1>();
  Tiles::template zero<2>();
  Tiles::template zero<3>();
  for (int64_t k0 = 0; k0 < kp; k0 += kChunk) {
    Tiles::template load<4>(a + k0, kp * 2);
    Tiles::template load<5>(a + 16 * kp + k0, kp * 2);
    Tiles::template load<6>(b + 2 * (k0 / 2) * width, width * 4);
    Tiles::template dot<0, 4, 6>();
    Tiles::template dot<2, 5, 6>();
    if (right) {
      Tiles::template load<7>(b + 2 * ((k0 / 2) * width + 16), width * 4);
      Tiles::template dot<1, 4, 7>();
      Tiles::template dot<3, 5, 7>();
    }
  }
  float block[kMR][kNR];
  Tiles::template store<0>(&block[0][0], kNR * 4);
  Tiles::template store<2>(&block[16][0], kNR * 4);
  if (right) {
    Tiles::template store<1>(&block[0][16], kNR * 4);
    Tiles::template store<3>(&block[16][16], kNR * 4);
  }
  for (int r = 0; r < m_rows; ++r) {
    float* row = c + r * c_rs;
    for (int j = 0; j < n_cols; ++j) row[j] = alpha * block[r][j] + (beta == 0 ? 0.0f : beta * row[j]);
  }
}

// Blocking: an A micro-panel of 32 x 512 bf16 (32 KiB) in L1, a B block of 512 x 512 bf16 (512 KiB) in L2.
constexpr int64_t kKC = 512, kMC = 128, kNC = 512;

template <typename S, typename Tiles>
constexpr GemmKernel<S, uint16_t, float> amx_kernel(const char* name) {
  return {name, kMR, kNR, 16, kKC, kMC, kNC, &tile_block<Tiles>, &pack_a<S>, &pack_b<S>, nullptr, kChunk};
}

}  // namespace

template <>
const GemmKernel<float, uint16_t, float>* amx_bf16_emulated_kernel<float>() {
  static const auto kernel = amx_kernel<float, SoftwareTiles>("amx_emulated");
  return &kernel;
}
template <>
const GemmKernel<BFloat16, uint16_t, float>* amx_bf16_emulated_kernel<BFloat16>() {
  static const auto kernel = amx_kernel<BFloat16, SoftwareTiles>("amx_emulated");
  return &kernel;
}

}  // namespace ember::cpu::detail

// ---------------------------------------------------------------------------------------------
// The instructions themselves, where the compiler has them; used only when CPUID says AMX-TILE and
// AMX-BF16 and the kernel grants this process the tile state (Linux arch_prctl).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(__clang__) && __GNUC__ >= 11
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
#include <immintrin.h>

namespace ember::cpu::detail {
namespace {

struct HardwareTiles {
  // Palette 1, eight tiles of 16 rows x 64 bytes; loaded once per thread.
  static void configure() {
    thread_local bool configured = false;
    if (configured) return;
    alignas(64) unsigned char config[64] = {};
    config[0] = 1;  // palette
    for (int t = 0; t < 8; ++t) {
      config[16 + 2 * t] = 64;  // bytes per row (uint16 little-endian)
      config[48 + t] = 16;      // rows
    }
    _tile_loadconfig(config);
    configured = true;
  }
  // NOTE: GCC's tile macros paste their tile number into the instruction's text, so it must be a
  // literal: each tile the kernel uses is spelled out.
  template <int T> static void zero() {
    if constexpr (T == 0) _tile_zero(0);
    else if constexpr (T == 1) _tile_zero(1);
    else if constexpr (T == 2) _tile_zero(2);
    else if constexpr (T == 3) _tile_zero(3);
    else static_assert(T < 4, "C tiles are 0 to 3");
  }
  template <int T> static void load(const void* base, int64_t stride) {
    if constexpr (T == 4) _tile_loadd(4, base, stride);
    else if constexpr (T == 5) _tile_loadd(5, base, stride);
    else if constexpr (T == 6) _tile_loadd(6, base, stride);
    else if constexpr (T == 7) _tile_loadd(7, base, stride);
    else static_assert(T >= 4, "A and B tiles are 4 to 7");
  }
  template <int T> static void store(void* base, int64_t stride) {
    if constexpr (T == 0) _tile_stored(0, base, stride);
    else if constexpr (T == 1) _tile_stored(1, base, stride);
    else if constexpr (T == 2) _tile_stored(2, base, stride);
    else if constexpr (T == 3) _tile_stored(3, base, stride);
    else static_assert(T < 4, "C tiles are 0 to 3");
  }
  template <int C, int A, int B> static void dot() {
    if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
    else if constexpr (C == 3 && A == 5 && B == 7) _tile_dpbf16ps(3, 5, 7);
    else static_assert(C < 0, "not a product of the kernel's tiles");
  }
};

}  // namespace

#pragma GCC pop_options

namespace {
bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1, amx_tile = (edx >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // linux/arch/x86/include/uapi/asm/prctl.h
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}
}  // namespace

template <>
const GemmKernel<float, uint16_t, float>* amx_bf16_kernel<float>() {
  static const auto kernel = amx_kernel<float, HardwareTiles>("amx");
  return amx_usable() ? &kernel : nullptr;
}
template <>
const GemmKernel<BFloat16, uint16_t, float>* amx_bf16_kernel<BFloat16>() {
  static const auto kernel = amx_kernel<BFloat16, HardwareTiles>("amx");
  return amx_usable() ? &kernel : nullptr;
}

}  // namespace ember::cpu::detail

#else

namespace ember::cpu::detail {
template <>
const GemmKernel<float, uint16_t, float>* amx_bf16_kernel<float>() { return nullptr; }
template <>
const GemmKernel<BFloat16, uint16_t, float>* amx_bf16_kernel<BFloat16>() { return nullptr; }
}  // namespace ember::cpu::detail

#endif
