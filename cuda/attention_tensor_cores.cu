// Fused scaled dot-product attention on the tensor cores, for mixed precision (bf16, or bfloat16 operands) on
// a GPU of compute capability 8.0 or more, unless EMBER_ATTENTION_TENSOR_CORES=off. The same algorithm and the
// same roundings as the CUDA-core kernels of cuda/attention_simt.cu with bf16 (Q, K, V, dO rounded to
// bfloat16 as they are staged, P and dS as they are written; the scores, the online softmax, lse and D in
// float32), but every product is WMMA's m16n16k16 (bfloat16 operands, float accumulation) on the tensor
// cores instead of a loop of float multiply-adds on the CUDA cores. The two differ in more than the order of
// their sums: a tensor core's products and partial sums are not rounded as a float FMA's are (docs/cuda.md),
// so the tests hold them to a tolerance, not to the bits.
// A fragment's layout over the warp's lanes is unspecified, so the kernels never touch one element-wise: a
// product's result is stored to a float tile in shared memory, the softmax and the masks work there with any
// thread on any element, and its bfloat16 result is loaded as the next product's operand. What must live
// across key tiles does so where its layout is known: the forward's output accumulator in each thread's
// registers (rescaled by the online softmax's alpha, a per-row factor a fragment cannot be given), the
// backward's dQ, dK and dV in fragments (plain sums).
// 256 threads = 8 warps; each product's 16 x 16 output tiles are dealt to the warps in turn.
// Tiles: 64 query rows by 64 keys in every kernel (the dK/dV kernel: 64 keys by 64 query rows).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <mma.h>

#include "core/kernels.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/dispatch.h"

namespace ember::cuda::attention {
namespace {

using Bf16 = __nv_bfloat16;
using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, Bf16, nvcuda::wmma::row_major>;
using FragB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Bf16, nvcuda::wmma::row_major>;
using FragBt = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Bf16, nvcuda::wmma::col_major>;
using FragC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

constexpr int kWarps = kBlock / 32;
constexpr int kRows = 64;  // query rows (keys in the dK/dV kernel) per block
constexpr int kCols = 64;  // keys (query rows in the dK/dV kernel) per tile
constexpr int kLds = kCols + 4;  // row stride of the float score tiles (WMMA: a multiple of 4 floats)
constexpr int kLdp = kCols + 8;  // of the bfloat16 weight tiles (a multiple of 8 bfloat16)
constexpr int kParts = kBlock / kRows;  // threads per row in the forward's softmax and in D
constexpr size_t kAlign = 128;          // every array's start (WMMA needs 32 bytes)

constexpr size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

template <int DMAX>
struct Strides {
  static constexpr int H = DMAX + 8;  // the bfloat16 [rows][DMAX] operand tiles
  static constexpr int O = DMAX + 4;  // the float [rows][DMAX] output tiles
};

// Byte offsets of each kernel's arrays in its dynamic shared memory (declared __align__(kAlign): each array
// starts kAlign-aligned, and the compiler knows every access is to shared memory), and the bytes to ask for.
template <int DMAX>
struct ForwardLayout {
  static constexpr size_t q = 0;                                               // Qh [kRows][H] bf16
  static constexpr size_t k = q + aligned(2 * kRows * Strides<DMAX>::H);       // Kh [kCols][H] bf16
  static constexpr size_t v = k + aligned(2 * kCols * Strides<DMAX>::H);       // Vh [kCols][H] bf16
  static constexpr size_t s = v + aligned(2 * kCols * Strides<DMAX>::H);       // Ss [kRows][kLds] float
  static constexpr size_t p = s + aligned(4 * kRows * kLds);                   // Ph [kRows][kLdp] bf16
  static constexpr size_t pv = p + aligned(2 * kRows * kLdp);                  // PVs [kRows][O] float
  static constexpr size_t stats = pv + aligned(4 * kRows * Strides<DMAX>::O);  // m, l, alpha, max/sum parts
  static constexpr size_t flags = stats + aligned(4 * kRows * (3 + 2 * kParts));  // kflag [kCols] int
  static constexpr size_t bytes = flags + aligned(4 * kCols);
};
template <int DMAX>
struct BackwardLayout {  // both backward kernels: two bf16 [rows] tiles, two bf16 [cols] tiles, ...
  static constexpr size_t a = 0;                                                // Qh (dQ) or Kh (dK/dV)
  static constexpr size_t b = a + aligned(2 * kRows * Strides<DMAX>::H);       // dOh or Vh
  static constexpr size_t c = b + aligned(2 * kRows * Strides<DMAX>::H);       // Kh or Qh
  static constexpr size_t d = c + aligned(2 * kCols * Strides<DMAX>::H);       // Vh or dOh
  static constexpr size_t s = d + aligned(2 * kCols * Strides<DMAX>::H);       // Ss [kRows][kLds] float
  static constexpr size_t dp = s + aligned(4 * kRows * kLds);                  // dPs, likewise
  static constexpr size_t p = dp + aligned(4 * kRows * kLds);                  // Ph [kRows][kLdp] bf16
  static constexpr size_t ds = p + aligned(2 * kRows * kLdp);                  // dSh, likewise
  static constexpr size_t stats = ds + aligned(2 * kRows * kLdp);              // lse, D, D's parts
  static constexpr size_t flags = stats + aligned(4 * kRows * (2 + kParts));   // kflag [kRows or kCols] int
  static constexpr size_t bytes = flags + aligned(4 * kRows);
  // The float [kRows][O] tile the results leave through, over Ss and dPs once the loop is done.
  static_assert(2 * aligned(4 * kRows * kLds) >= 4 * kRows * Strides<DMAX>::O, "the output tile fits Ss and dPs");
};

// C [M][N] (float, row stride ldc) = A B^T for bfloat16 row-major A [M][K] and B [N][K]: B read as a
// column-major K x N operand. Each warp makes every kWarps-th 16 x 16 tile of C.
template <int M, int N, int K>
__device__ __forceinline__ void product_abt(float* C, int ldc, const Bf16* A, int lda, const Bf16* B, int ldb) {
  constexpr int tiles_n = N / 16;
  for (int t = threadIdx.x / 32; t < (M / 16) * tiles_n; t += kWarps) {
    const int tm = t / tiles_n, tn = t % tiles_n;
    FragC c;
    nvcuda::wmma::fill_fragment(c, 0.0f);
    EMBER_UNROLL
    for (int k = 0; k < K; k += 16) {
      FragA a;
      FragBt b;
      nvcuda::wmma::load_matrix_sync(a, A + tm * 16 * lda + k, lda);
      nvcuda::wmma::load_matrix_sync(b, B + tn * 16 * ldb + k, ldb);
      nvcuda::wmma::mma_sync(c, a, b, c);
    }
    nvcuda::wmma::store_matrix_sync(C + tm * 16 * ldc + tn * 16, c, ldc, nvcuda::wmma::mem_row_major);
  }
}

// The warp's tiles of an [M][N] result, kept in fragments across calls: tile warp + kWarps i for i < PER.
template <int M, int N>
struct WarpTiles {
  static constexpr int count = (M / 16) * (N / 16);
  static constexpr int PER = (count + kWarps - 1) / kWarps;
  FragC acc[PER];
  __device__ __forceinline__ void zero() {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i)
      if (threadIdx.x / 32 + kWarps * i < count) nvcuda::wmma::fill_fragment(acc[i], 0.0f);
  }
  // acc += A B for bfloat16 row-major A [M][K] and B [K][N].
  template <int K>
  __device__ __forceinline__ void add_product(const Bf16* A, int lda, const Bf16* B, int ldb) {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i) {
      const int t = threadIdx.x / 32 + kWarps * i;
      if (t >= count) continue;  // the same for every lane of the warp
      const int tm = t / (N / 16), tn = t % (N / 16);
      EMBER_UNROLL
      for (int k = 0; k < K; k += 16) {
        FragA a;
        FragB b;
        nvcuda::wmma::load_matrix_sync(a, A + tm * 16 * lda + k, lda);
        nvcuda::wmma::load_matrix_sync(b, B + k * ldb + tn * 16, ldb);
        nvcuda::wmma::mma_sync(acc[i], a, b, acc[i]);
      }
    }
  }
  __device__ __forceinline__ void store(float* C, int ldc) const {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i) {
      const int t = threadIdx.x / 32 + kWarps * i;
      if (t < count)
        nvcuda::wmma::store_matrix_sync(C + (t / (N / 16)) * 16 * ldc + (t % (N / 16)) * 16, acc[i], ldc,
                                        nvcuda::wmma::mem_row_major);
    }
  }
};

// Builds for a GPU without bfloat16 WMMA (compute capability below 8.0) compile the kernels empty; the
// host never launches them there (tensor_cores_usable).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define EMBER_TC_KERNEL_BODY 0
#else
#define EMBER_TC_KERNEL_BODY 1
#endif

// ---- Forward. Block (b, h, query tile): blockIdx.x = (b * H + h) * n_query_tiles + qt, as flash_forward_kernel.
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock) forward_kernel(const __grid_constant__ Args a, float scale) {
#if EMBER_TC_KERNEL_BODY
  using L = ForwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  constexpr int RPT = kRows / kGrid, OPT = DMAX / kGrid, cols_per_part = kCols / kParts;
  extern __shared__ __align__(128) unsigned char tc_shared[];
  Bf16* Qh = reinterpret_cast<Bf16*>(tc_shared + L::q);
  Bf16* Kh = reinterpret_cast<Bf16*>(tc_shared + L::k);
  Bf16* Vh = reinterpret_cast<Bf16*>(tc_shared + L::v);
  float* Ss = reinterpret_cast<float*>(tc_shared + L::s);
  Bf16* Ph = reinterpret_cast<Bf16*>(tc_shared + L::p);
  float* PVs = reinterpret_cast<float*>(tc_shared + L::pv);
  float* m_s = reinterpret_cast<float*>(tc_shared + L::stats);
  float* l_s = m_s + kRows;
  float* alpha_s = l_s + kRows;
  float* max_part = alpha_s + kRows;
  float* sum_part = max_part + kRows * kParts;
  int* kflag = reinterpret_cast<int*>(tc_shared + L::flags);

  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int row = tid / kParts, part = tid % kParts;
  const auto [bh, b, h, q0] = block_tile(d, d.T, kRows);

  load_rows_bf16<DMAX, kRows, H>(Qh, a.q.at<const S>(b, h, 0), a.q.row, q0, d.T, d.Dh);
  start_rows<float, kRows>(m_s, l_s);
  float acc[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) acc[r][o] = 0.0f;

  const int64_t kt_end = key_tiles_for(d, q0, kRows, kCols);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * kCols;
    if (!key_tile_seen<kCols>(a, b, h, q0, kRows, k0)) continue;
    __syncthreads();  // the previous tile's Kh, Vh, Ph, PVs and kflag are no longer read (and Qh is loaded)
    load_rows_bf16<DMAX, kCols, H>(Kh, a.k.at<const S>(b, h, 0), a.k.row, k0, d.S, d.Dh);
    load_rows_bf16<DMAX, kCols, H>(Vh, a.v.at<const S>(b, h, 0), a.v.row, k0, d.S, d.Dv);
    load_key_flags<kCols>(kflag, a, b, h, k0);
    __syncthreads();

    // 1. Scores on the tensor cores, then scaled and masked in shared memory.
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Qh, H, Kh, H);
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int i = idx / kCols, j = idx % kCols;
      float& s = Ss[i * kLds + j];
      s = masked_score<float, S>(a, kflag[j] != 0, b, h, q0 + i, k0 + j, scale * s);
    }
    __syncthreads();

    // 2. Online softmax, as flash_forward_kernel's; the weights go to Ph in bfloat16.
    const float* srow = Ss + row * kLds + part * cols_per_part;
    Bf16* prow = Ph + row * kLdp + part * cols_per_part;
    online_softmax_step<float, kParts>(srow, cols_per_part, row, part, max_part, sum_part, m_s, l_s, alpha_s,
                                       [&](int c, float w) { prow[c] = __float2bfloat16_rn(w); });
    // 3. P V on the tensor cores (Ph was written before the barrier above), then O = alpha O + P V.
    {
      WarpTiles<kRows, DMAX> pv;
      pv.zero();
      pv.template add_product<kCols>(Ph, kLdp, Vh, H);
      pv.store(PVs, LDO);
    }
    __syncthreads();
    for (int r = 0; r < RPT; ++r) {
      const int i = ty + kGrid * r;
      const float alpha = alpha_s[i];
      for (int o = 0; o < OPT; ++o) acc[r][o] = alpha * acc[r][o] + PVs[i * LDO + tx + kGrid * o];
    }
  }
  __syncthreads();  // m_s, l_s final (also when every tile was skipped)
  write_output<float, S, kRows>(a, bh, b, h, q0, acc, m_s, l_s);
#endif
}

// A [kRows][DMAX] float tile (row stride LDO) out to `rows` rows from first_row of a [.., cols] block of
// `dst` (rows `stride` apart), each value times `factor` and rounded to S.
template <int DMAX, typename S>
__device__ __forceinline__ void store_rows(S* dst, int64_t stride, int64_t first_row, int64_t rows, int64_t cols,
                                           const float* tile, float factor) {
  for (int idx = threadIdx.x; idx < kRows * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    if (first_row + r < rows && c < cols) dst[(first_row + r) * stride + c] = S(factor * tile[r * Strides<DMAX>::O + c]);
  }
}

// ---- Backward, kernel 1 of 2: dQ and delta (D_i), as flash_backward_dq_kernel. Block (b, h, query tile).
// (DMAX 64 is held to 128 registers, 2 blocks per SM: left free, ptxas picked 80 and spilled.)
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock, DMAX == 64 ? 2 : 1) backward_dq_kernel(const __grid_constant__ Args a,
                                                                               float scale) {
#if EMBER_TC_KERNEL_BODY
  using L = BackwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  extern __shared__ __align__(128) unsigned char tc_shared[];
  Bf16* Qh = reinterpret_cast<Bf16*>(tc_shared + L::a);
  Bf16* dOh = reinterpret_cast<Bf16*>(tc_shared + L::b);
  Bf16* Kh = reinterpret_cast<Bf16*>(tc_shared + L::c);
  Bf16* Vh = reinterpret_cast<Bf16*>(tc_shared + L::d);
  float* Ss = reinterpret_cast<float*>(tc_shared + L::s);
  float* dPs = reinterpret_cast<float*>(tc_shared + L::dp);
  Bf16* dSh = reinterpret_cast<Bf16*>(tc_shared + L::ds);
  float* lse_s = reinterpret_cast<float*>(tc_shared + L::stats);
  float* d_s = lse_s + kRows;
  float* d_part = d_s + kRows;
  int* kflag = reinterpret_cast<int*>(tc_shared + L::flags);
  float* dQs = Ss;  // [kRows][LDO], once the loop is done

  const Dims& d = a.d;
  const int tid = threadIdx.x;
  const auto [bh, b, h, q0] = block_tile(d, d.T, kRows);

  load_rows_bf16<DMAX, kRows, H>(Qh, a.q.at<const S>(b, h, 0), a.q.row, q0, d.T, d.Dh);
  load_rows_bf16<DMAX, kRows, H>(dOh, a.dout.at<const S>(b, h, 0), a.dout.row, q0, d.T, d.Dv);
  // D_i = dO_i . O_i from the unrounded dO, in flash_backward_dq_kernel's order (the same bits).
  row_deltas<float, S, kRows, kParts>(a, bh, b, h, q0, nullptr, 0, d_part, d_s, lse_s);
  WarpTiles<kRows, DMAX> dq;
  dq.zero();

  const int64_t kt_end = key_tiles_for(d, q0, kRows, kCols);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * kCols;
    if (!key_tile_seen<kCols>(a, b, h, q0, kRows, k0)) continue;
    __syncthreads();  // the previous tile is no longer read; d_s and lse_s written
    load_rows_bf16<DMAX, kCols, H>(Kh, a.k.at<const S>(b, h, 0), a.k.row, k0, d.S, d.Dh);
    load_rows_bf16<DMAX, kCols, H>(Vh, a.v.at<const S>(b, h, 0), a.v.row, k0, d.S, d.Dv);
    load_key_flags<kCols>(kflag, a, b, h, k0);
    __syncthreads();
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Qh, H, Kh, H);    // the forward's scores
    product_abt<kRows, kCols, DMAX>(dPs, kLds, dOh, H, Vh, H);  // dP = dO V^T
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int i = idx / kCols, j = idx % kCols;
      const float score = q0 + i >= d.T ? attn::neg_inf<float>()
                                        : masked_score<float, S>(a, kflag[j] != 0, b, h, q0 + i, k0 + j,
                                                                 scale * Ss[i * kLds + j]);
      const float p = prob_of(score, lse_s[i]);
      dSh[i * kLdp + j] = __float2bfloat16_rn(attn::softmax_grad_score(p, dPs[i * kLds + j], d_s[i]));
    }
    __syncthreads();
    dq.template add_product<kCols>(dSh, kLdp, Kh, H);  // dQ += dS K
  }
  __syncthreads();  // Ss and dPs no longer read: dQs goes over them
  dq.store(dQs, LDO);
  __syncthreads();
  store_rows<DMAX>(a.dq.at<S>(b, h, 0), a.dq.row, q0, d.T, d.Dh, dQs, scale);
#endif
}

// ---- Backward, kernel 2 of 2: dK and dV, as flash_backward_dkv_kernel. Block (b, h, key tile); the
// rows of its tiles are keys, the columns query rows.
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock) backward_dkv_kernel(const __grid_constant__ Args a, float scale) {
#if EMBER_TC_KERNEL_BODY
  using L = BackwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  extern __shared__ __align__(128) unsigned char tc_shared[];
  Bf16* Kh = reinterpret_cast<Bf16*>(tc_shared + L::a);
  Bf16* Vh = reinterpret_cast<Bf16*>(tc_shared + L::b);
  Bf16* Qh = reinterpret_cast<Bf16*>(tc_shared + L::c);
  Bf16* dOh = reinterpret_cast<Bf16*>(tc_shared + L::d);
  float* Ss = reinterpret_cast<float*>(tc_shared + L::s);    // S^T [keys][queries]
  float* dPs = reinterpret_cast<float*>(tc_shared + L::dp);  // dP^T
  Bf16* Ph = reinterpret_cast<Bf16*>(tc_shared + L::p);      // P^T
  Bf16* dSh = reinterpret_cast<Bf16*>(tc_shared + L::ds);    // dS^T
  float* lse_s = reinterpret_cast<float*>(tc_shared + L::stats);
  float* d_s = lse_s + kCols;
  int* kflag = reinterpret_cast<int*>(tc_shared + L::flags);
  float* outs = Ss;  // [kRows][LDO]: dK, then dV, once the loop is done

  const Dims& d = a.d;
  const int tid = threadIdx.x;
  const auto [bh, b, h, k0] = block_tile(d, d.S, kRows);

  load_rows_bf16<DMAX, kRows, H>(Kh, a.k.at<const S>(b, h, 0), a.k.row, k0, d.S, d.Dh);
  load_rows_bf16<DMAX, kRows, H>(Vh, a.v.at<const S>(b, h, 0), a.v.row, k0, d.S, d.Dv);
  load_key_flags<kRows>(kflag, a, b, h, k0);
  WarpTiles<kRows, DMAX> dk, dv;
  dk.zero();
  dv.zero();

  const int64_t n_qt = any_key_live<kRows>(a, b, h, k0) ? (d.T + kCols - 1) / kCols : 0;
  const int64_t qt_begin = d.causal ? k0 / kCols : 0;
  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int64_t i0 = qt * kCols;
    if (!tile_in_band(d, i0, kCols, k0, kRows)) continue;
    __syncthreads();  // the previous tile is no longer read (and Kh, Vh, kflag are loaded)
    load_rows_bf16<DMAX, kCols, H>(Qh, a.q.at<const S>(b, h, 0), a.q.row, i0, d.T, d.Dh);
    load_rows_bf16<DMAX, kCols, H>(dOh, a.dout.at<const S>(b, h, 0), a.dout.row, i0, d.T, d.Dv);
    load_row_stats<float, kCols>(a, bh, i0, lse_s, d_s);
    __syncthreads();
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Kh, H, Qh, H);    // S^T = K Q^T
    product_abt<kRows, kCols, DMAX>(dPs, kLds, Vh, H, dOh, H);  // dP^T = V dO^T
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int j = idx / kCols, i = idx % kCols;
      const float score = i0 + i >= d.T ? attn::neg_inf<float>()
                                        : masked_score<float, S>(a, kflag[j] != 0, b, h, i0 + i, k0 + j,
                                                                 scale * Ss[j * kLds + i]);
      const float p = prob_of(score, lse_s[i]);
      Ph[j * kLdp + i] = __float2bfloat16_rn(p);
      dSh[j * kLdp + i] = __float2bfloat16_rn(attn::softmax_grad_score(p, dPs[j * kLds + i], d_s[i]));
    }
    __syncthreads();
    dv.template add_product<kCols>(Ph, kLdp, dOh, H);  // dV += P^T dO
    dk.template add_product<kCols>(dSh, kLdp, Qh, H);  // dK += dS^T Q
  }
  // dK, then dV, each through the float tile over Ss and dPs.
  __syncthreads();  // Ss and dPs no longer read
  dk.store(outs, LDO);
  __syncthreads();
  store_rows<DMAX>(a.dk.at<S>(b, h, 0), a.dk.row, k0, d.S, d.Dh, outs, scale);
  __syncthreads();  // dK's tile read
  dv.store(outs, LDO);
  __syncthreads();
  store_rows<DMAX>(a.dv.at<S>(b, h, 0), a.dv.row, k0, d.S, d.Dv, outs, 1.0f);
#endif
}

#undef EMBER_TC_KERNEL_BODY

template <typename S>
void forward_typed(int device, const Args& a) {
  cudaStream_t stream = use_device(device);
  const float scale = attention_scale<float>(a.d);
  with_head_dim(head_size(a.d), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    const int64_t blocks = a.d.B * a.d.H * ((a.d.T + kRows - 1) / kRows);
    check_blocks(blocks);
    const size_t shared = ForwardLayout<DMAX>::bytes;
    reserve_shared(forward_kernel<DMAX, S>, shared, device, "tc::forward_kernel");
    forward_kernel<DMAX, S><<<unsigned(blocks), kBlock, shared, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("tc::forward_kernel");
  });
}

template <typename S>
void backward_typed(int device, const Args& a) {
  cudaStream_t stream = use_device(device);
  const float scale = attention_scale<float>(a.d);
  with_head_dim(head_size(a.d), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    const int64_t q_blocks = a.d.B * a.d.H * ((a.d.T + kRows - 1) / kRows);
    const int64_t k_blocks = a.d.B * a.d.H * ((a.d.S + kRows - 1) / kRows);
    check_blocks(q_blocks > k_blocks ? q_blocks : k_blocks);
    const size_t shared = BackwardLayout<DMAX>::bytes;
    reserve_shared(backward_dq_kernel<DMAX, S>, shared, device, "tc::backward_dq_kernel");
    reserve_shared(backward_dkv_kernel<DMAX, S>, shared, device, "tc::backward_dkv_kernel");
    // Kernel 1 writes delta, which kernel 2 reads: the stream runs them in this order.
    backward_dq_kernel<DMAX, S><<<unsigned(q_blocks), kBlock, shared, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("tc::backward_dq_kernel");
    backward_dkv_kernel<DMAX, S><<<unsigned(k_blocks), kBlock, shared, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("tc::backward_dkv_kernel");
  });
}

}  // namespace

void tensor_core_forward(int device, int dtype, const Args& a) {
  dispatch_bf16_or_float(dtype, [&](auto tag) { forward_typed<decltype(tag)>(device, a); });
}

void tensor_core_backward(int device, int dtype, const Args& a) {
  dispatch_bf16_or_float(dtype, [&](auto tag) { backward_typed<decltype(tag)>(device, a); });
}

}  // namespace ember::cuda::attention
