// The GEMM driver: picks a micro-kernel, splits C across threads, blocks for the caches, packs A and B.
//
// Loop nest run by each thread on its own block of C (the kernel sets the sizes):
//   for jc in N step nc:
//     for pc in K step kc:             B block  kc x nc  packed into nr-wide micro-panels (L2)
//       for ic in M step mc:           A block  mc x kc  packed into mr-tall micro-panels
//         for ir in mc step mr:        one A micro-panel stays in L1 ...
//           for jr in nc step nr:      ... while the B micro-panels stream past it from L2
//             tile(kc, A panel, B panel, C[ic+ir : +mr, jc+jr : +nr])
// NOTE: jr innermost walks C along its rows (contiguous), which the prefetchers follow far better
// than walking down a column of tiles; measured a few percent faster at the model's shapes.
// Packing reads A and B through their strides, so transposed operands cost nothing extra.
// When B's block is a single micro-panel (N <= nr, e.g. attention's P V with a head of 32), each element of
// A meets B once: a kernel with tile_direct then reads A in place, unpacked (reads_a_in_place).
#include "core/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cpu/gemm_kernels.h"
#include "core/cpu/rows.h"
#include "core/error.h"
#include "core/parallel.h"

namespace ember::cpu {

using detail::GemmKernel;
using detail::round_up;

namespace {

// ---------------------------------------------------------------------------------------------
// Kernel selection

template <typename T>
const GemmKernel<T>* best_kernel();

template <>
const GemmKernel<float>* best_kernel<float>() {
  if (const auto* kernel = detail::avx512_float_kernel()) return kernel;
  if (const auto* kernel = detail::avx2_float_kernel()) return kernel;
  if (const auto* kernel = detail::neon_float_kernel()) return kernel;
  return detail::generic_float_kernel();
}

template <>
const GemmKernel<double>* best_kernel<double>() {
  if (const auto* kernel = detail::avx512_double_kernel()) return kernel;
  return detail::generic_double_kernel();
}

// Chosen once at first use; set_gemm_kernel() may override (tests use it to cover every kernel).
template <typename T>
std::atomic<const GemmKernel<T>*>& active_kernel() {
  static std::atomic<const GemmKernel<T>*> kernel{best_kernel<T>()};
  return kernel;
}

// ---------------------------------------------------------------------------------------------
// Per-thread packing buffers: grown on demand, then reused (no allocation in steady state).

class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  ~PackBuffer() { std::free(data_); }

  template <typename T>
  T* get(int64_t count) {
    size_t bytes = static_cast<size_t>(count) * sizeof(T);
    if (bytes > capacity_) {
      std::free(data_);
      capacity_ = round_up(static_cast<int64_t>(bytes), 4096);
      data_ = std::aligned_alloc(64, capacity_);
      EMBER_CHECK(data_ != nullptr, "out of CPU memory: gemm cannot allocate a {}-byte packing buffer", capacity_);
    }
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

struct Workspace {
  PackBuffer a;
  PackBuffer b;
  PackBuffer c;        // one float32 tile, when C is bfloat16
  PackBuffer columns;  // gemm_bf16_pair_major's A de-interleaved, for a kernel that cannot read it in place
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// ---------------------------------------------------------------------------------------------
// One product and how it is cut up

// S: the type of A and B; T: of C, alpha, beta and the bias (the same but for the bfloat16 GEMM).
template <typename T, typename S = T>
struct Problem {
  int64_t M, N, K;
  T alpha;
  const S* A;
  int64_t a_rs, a_cs;
  const S* B;
  int64_t b_rs, b_cs;
  T beta;
  T* C;
  int64_t c_rs;
  const T* bias = nullptr;  // added to every row of C once, or nullptr
  // A bfloat16 C instead of C (only with T = float and beta == 0; K within one K block: gemm_one_with):
  // each tile is summed in float32 and rounded once as it is stored.
  BFloat16* C16 = nullptr;
  // A is pair-major (gemm_bf16_pair_major): A(i, k) for an even k and A(i, k + 1) are the two words at
  // A + i * a_rs + k * a_cs, with a_rs 2. Only for a kernel that reads it in place (the entry checks).
  bool a_pairs = false;
};

// Splits `length` into equal blocks of at most `block` (a multiple of `step`): returns the size.
int64_t balanced_block(int64_t length, int64_t block, int64_t step) {
  int64_t blocks = (length + block - 1) / block;
  return std::min(block, round_up((length + blocks - 1) / blocks, step));
}

// C = beta * C (+ bias) over rows x cols of C (rows c_rs apart) starting at column `col` (beta == 0
// writes without reading C).
template <typename T, typename S>
void scale_c(const Problem<T, S>& p, T* c, int64_t c_rs, int64_t rows, int64_t cols, int64_t col) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = c + i * c_rs;
    const T* bias = p.bias != nullptr ? p.bias + col : nullptr;
    if (p.beta == T(0)) {
      if (bias != nullptr) std::copy(bias, bias + cols, row);
      else std::fill(row, row + cols, T(0));
    } else {
      if (p.beta != T(1))
        for (int64_t j = 0; j < cols; ++j) row[j] *= p.beta;
      if (bias != nullptr)
        for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }
}

// Stores rows x cols floats (rows in_rs apart) as bfloat16, rounded to nearest even: the kernel's vector
// routine when it has one (which may flush subnormals, as its packing does), else core/bfloat16.h's loop.
template <typename Kernel>
void round_rows(const Kernel& kernel, const float* in, int64_t in_rs, BFloat16* out, int64_t out_rs, int64_t rows,
                int64_t cols) {
  if (kernel.round_rows != nullptr)
    return kernel.round_rows(in, in_rs, out, out_rs, static_cast<int>(rows), static_cast<int>(cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * out_rs + j] = BFloat16(in[i * in_rs + j]);
}

// Whether the kernel reads A in place for a B block `nc` columns wide: when that block is one micro-panel
// (each A element then meets B once, and packing it would cost about what using it does) and A has the
// layout the kernel's direct tile reads: a contiguous dimension (float), or contiguous rows (bfloat16,
// whose pairs of k must be adjacent words).
template <typename Kernel>
bool reads_a_in_place(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p,
                      int64_t nc) {
  using S = typename Kernel::Source;
  if (kernel.tile_direct == nullptr || nc > kernel.nr) return false;
  if constexpr (std::is_same_v<S, typename Kernel::Packed>) return p.a_rs == 1 || p.a_cs == 1;
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<typename Kernel::Packed, uint16_t>)
    return p.a_cs == 1 || p.a_pairs;
  return false;
}

// C[m0:m1, jc:jc+nc] += the K block [pc, pc+kc) of the product, A read in place (reads_a_in_place).
// c_scratch: one float tile, for a bfloat16 C (p.C16), which then holds one K block (beta 0).
template <typename Kernel>
void tiles_with_a_in_place(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p,
                           int64_t m0, int64_t m1, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                           typename Kernel::Output beta, const typename Kernel::Packed* b_panel,
                           typename Kernel::Output* c_scratch) {
  using T = typename Kernel::Output;
  using P = typename Kernel::Packed;
  for (int64_t ir = m0; ir < m1; ir += kernel.mr) {
    const int m_rows = static_cast<int>(std::min<int64_t>(kernel.mr, m1 - ir));
    const P* a = reinterpret_cast<const P*>(p.A + ir * p.a_rs + pc * p.a_cs);  // (bfloat16: its bits)
    if constexpr (std::is_same_v<T, float>) {
      if (p.C16 != nullptr && kernel.tile_to_bf16 != nullptr) {  // rounded as stored (one K block: pc is 0)
        kernel.tile_to_bf16(kc, a, std::max<int64_t>(p.a_rs, 1), p.a_cs, b_panel, p.C16 + ir * p.c_rs + jc, p.c_rs,
                            m_rows, static_cast<int>(nc), p.alpha, p.bias != nullptr ? p.bias + jc : nullptr);
        continue;
      }
    }
    T* c_tile = p.C16 != nullptr ? c_scratch : p.C + ir * p.c_rs + jc;
    const int64_t c_rs = p.C16 != nullptr ? kernel.nr : p.c_rs;
    T tile_beta = beta;
    if (pc == 0 && p.bias != nullptr) {
      scale_c(p, c_tile, c_rs, m_rows, nc, jc);  // C = beta C + bias
      tile_beta = T(1);
    }
    kernel.tile_direct(kc, a, p.a_rs, p.a_cs, b_panel, c_tile, c_rs, m_rows, static_cast<int>(nc), p.alpha, tile_beta);
    if constexpr (std::is_same_v<T, float>) {
      if (p.C16 != nullptr) round_rows(kernel, c_scratch, kernel.nr, p.C16 + ir * p.c_rs + jc, p.c_rs, m_rows, nc);
    }
  }
}

// C[m0:m1, n0:n1] on the calling thread.
template <typename Kernel>
void gemm_block(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p, int64_t m0,
                int64_t m1, int64_t n0, int64_t n1) {
  using T = typename Kernel::Output;
  using P = typename Kernel::Packed;
  const int mr = kernel.mr;
  const int nr = kernel.nr;
  const int64_t kc_block = balanced_block(p.K, kernel.kc, kernel.k_granule);
  const int64_t mc_block = balanced_block(m1 - m0, kernel.mc, mr);
  const int64_t nc_block = balanced_block(n1 - n0, kernel.nc, nr);

  Workspace& workspace = thread_workspace();
  P* a_packed = workspace.a.get<P>(mc_block * kc_block);
  P* b_packed = workspace.b.get<P>(nc_block * kc_block);
  T* c_scratch = p.C16 != nullptr ? workspace.c.get<T>(int64_t(mr) * nr) : nullptr;

  for (int64_t jc = n0; jc < n1; jc += nc_block) {
    const int64_t nc = std::min(nc_block, n1 - jc);
    for (int64_t pc = 0; pc < p.K; pc += kc_block) {
      const int64_t kc = std::min(kc_block, p.K - pc);
      const int64_t panel_k = round_up(kc, kernel.k_granule);  // a micro-panel's length (k padded with zeros)
      const T beta = pc == 0 ? p.beta : T(1);  // later K blocks accumulate onto the first
      kernel.pack_b(p.B + pc * p.b_rs + jc * p.b_cs, p.b_rs, p.b_cs, kc, nc, b_packed);
      if (reads_a_in_place(kernel, p, nc)) {  // one B micro-panel: each A element is used once, unpacked
        tiles_with_a_in_place(kernel, p, m0, m1, jc, nc, pc, kc, beta, b_packed, c_scratch);
        continue;
      }
      for (int64_t ic = m0; ic < m1; ic += mc_block) {
        const int64_t mc = std::min(mc_block, m1 - ic);
        kernel.pack_a(p.A + ic * p.a_rs + pc * p.a_cs, p.a_rs, p.a_cs, mc, kc, a_packed);
        for (int64_t ir = 0; ir < mc; ir += mr) {
          const int m_rows = static_cast<int>(std::min<int64_t>(mr, mc - ir));
          for (int64_t jr = 0; jr < nc; jr += nr) {
            const int n_cols = static_cast<int>(std::min<int64_t>(nr, nc - jr));
            const P* b_panel = b_packed + jr * panel_k;
            if constexpr (std::is_same_v<T, float>) {
              if (p.C16 != nullptr && kernel.tile_to_bf16 != nullptr) {  // rounded as stored (one K block: pc is 0)
                kernel.tile_to_bf16(kc, a_packed + ir * panel_k, 0, 1, b_panel, p.C16 + (ic + ir) * p.c_rs + jc + jr,
                                    p.c_rs, m_rows, n_cols, p.alpha, p.bias != nullptr ? p.bias + jc + jr : nullptr);
                continue;
              }
            }
            // A bfloat16 C: the tile is summed into float scratch (one K block, beta 0), then rounded.
            T* c_tile = p.C16 != nullptr ? c_scratch : p.C + (ic + ir) * p.c_rs + jc + jr;
            const int64_t c_rs = p.C16 != nullptr ? nr : p.c_rs;
            if (pc == 0 && p.bias != nullptr) {
              if (kernel.tile_bias != nullptr && p.alpha == T(1) && p.beta == T(0)) {  // sums start at the bias
                kernel.tile_bias(kc, a_packed + ir * panel_k, b_panel, c_tile, c_rs, m_rows, n_cols,
                                 p.bias + jc + jr);
              } else {
                scale_c(p, c_tile, c_rs, m_rows, n_cols, jc + jr);  // C = beta C + bias while the tile is in cache
                kernel.tile(kc, a_packed + ir * panel_k, b_panel, c_tile, c_rs, m_rows, n_cols, p.alpha, T(1));
              }
            } else {
              kernel.tile(kc, a_packed + ir * panel_k, b_panel, c_tile, c_rs, m_rows, n_cols, p.alpha, beta);
            }
            if constexpr (std::is_same_v<T, float>) {
              if (p.C16 != nullptr)
                round_rows(kernel, c_scratch, nr, p.C16 + (ic + ir) * p.c_rs + jc + jr, p.c_rs, m_rows, n_cols);
            }
          }
        }
      }
    }
  }
}

// Below this much work (M*N*K multiply-adds) per thread, another thread costs more than it saves.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 19;

int threads_for(int64_t M, int64_t N, int64_t K, int available) {
  int64_t work = M * N * std::max<int64_t>(K, 1);
  int64_t by_work = std::max<int64_t>(1, work / kMinWorkPerThread);
  return static_cast<int>(std::min<int64_t>(available, by_work));
}

// How `threads` threads tile C: a grid of row_groups x col_groups rectangles.
struct ThreadGrid {
  int row_groups;
  int col_groups;
};

// What packing one element costs, in multiply-adds: packing streams A and B from memory at
// about an element per cycle, while the AVX-512 kernel retires 32 multiply-adds per cycle.
constexpr double kPackCostInMultiplyAdds = 32.0;

// Picks the grid with the least work on the busiest thread: its multiply-adds (edge tiles
// counted whole) plus its packing: its B columns once, its A rows once per nc-wide block of
// its columns. E.g. 1024^3 on 2 threads splits N (each thread packs half of B and all of A
// once) rather than M (all of B, and half of A twice).
template <typename Kernel>
ThreadGrid choose_grid(const Kernel& kernel, int64_t M, int64_t N, int64_t K, int threads) {
  const int64_t m_tiles = (M + kernel.mr - 1) / kernel.mr;
  const int64_t n_tiles = (N + kernel.nr - 1) / kernel.nr;
  ThreadGrid best{threads, 1};
  double best_cost = -1;
  for (int rows = 1; rows <= threads; ++rows) {
    if (threads % rows != 0) continue;
    const int cols = threads / rows;
    if (rows > m_tiles || cols > n_tiles) continue;
    const int64_t m = (m_tiles + rows - 1) / rows * kernel.mr;
    const int64_t n = (n_tiles + cols - 1) / cols * kernel.nr;
    const int64_t n_blocks = (n + kernel.nc - 1) / kernel.nc;
    const double packed = static_cast<double>(m * K * n_blocks + n * K);
    const double cost = static_cast<double>(m) * n * K + kPackCostInMultiplyAdds * packed;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = {rows, cols};
    }
  }
  return best;
}

// One rectangle of a thread grid: C's tiles cut into row_groups x col_groups near-equal parts.
struct GridCell {
  int64_t m0, m1, n0, n1;
};
template <typename Kernel>
GridCell grid_cell(const Kernel& kernel, int64_t M, int64_t N, ThreadGrid grid, int64_t cell) {
  const int64_t m_tiles = (M + kernel.mr - 1) / kernel.mr, n_tiles = (N + kernel.nr - 1) / kernel.nr;
  const int64_t row_group = cell / grid.col_groups, col_group = cell % grid.col_groups;
  return {std::min(M, m_tiles * row_group / grid.row_groups * kernel.mr),
          std::min(M, m_tiles * (row_group + 1) / grid.row_groups * kernel.mr),
          std::min(N, n_tiles * col_group / grid.col_groups * kernel.nr),
          std::min(N, n_tiles * (col_group + 1) / grid.col_groups * kernel.nr)};
}

// The products run side by side, each cut into its thread grid: `grid` cells per product, one parallel_for.
template <typename Kernel>
void run_grids(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>* products,
               int64_t count, ThreadGrid grid) {
  // Everything the chunks need, so the lambda captures a single reference.
  // NOTE: a lambda of at most 16 trivially copyable bytes fits inside std::function, which then
  // does not allocate; a [&] lambda naming several variables would be bigger.
  struct Split {
    const Kernel& kernel;
    const Problem<typename Kernel::Output, typename Kernel::Source>* products;
    ThreadGrid grid;
    int64_t cells;  // per product
  } split{kernel, products, grid, int64_t{grid.row_groups} * grid.col_groups};
  parallel_for(0, count * split.cells, 1, [&split](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {  // task t: product t / cells, its cell t % cells
      const auto& p = split.products[t / split.cells];
      const GridCell c = grid_cell(split.kernel, p.M, p.N, split.grid, t % split.cells);
      if (c.m0 < c.m1 && c.n0 < c.n1) gemm_block(split.kernel, p, c.m0, c.m1, c.n0, c.n1);
    }
  });
}

template <typename Kernel>
void gemm_threaded(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p,
                   int threads) {
  if (threads <= 1) {
    gemm_block(kernel, p, 0, p.M, 0, p.N);
    return;
  }
  run_grids(kernel, &p, 1, choose_grid(kernel, p.M, p.N, p.K, threads));
}

// A product far longer in K than C is wide: a weight's gradient, dW = g^T x, whose K is every token of
// the batch (8,192 in the recipe) and whose C is the weight (at most 512 x 512). Cutting C's rows or
// columns between two threads has each pack all of one operand (K x the other side); cutting K in two
// has each pack only its half of both. So K is cut in two (at a K block): the first half summed into C
// (with beta and the bias), the second into a scratch C, added to C at the end. It is cut so whatever the
// thread count (one thread runs the halves one after the other), so the result does not depend on it.
// Measured at the recipe's dW shapes, 2 threads, in one busy sitting: bfloat16 1.0x to 1.1x faster, float32
// unchanged (docs/performance.md).
template <typename Kernel>
bool splits_k(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p) {
  return p.C16 == nullptr && p.K >= 4 * kernel.kc && p.K >= 8 * std::max(p.M, p.N);
}

template <typename Kernel>
void gemm_split_k(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p,
                  int threads) {
  using T = typename Kernel::Output;
  const int64_t first_k = round_up((p.K + 1) / 2, kernel.kc);
  const auto second_sums = std::make_unique_for_overwrite<T[]>(size_t(p.M * p.N));  // beta 0: written, not read
  Problem<T, typename Kernel::Source> halves[2] = {p, p};
  halves[0].K = first_k;
  Problem<T, typename Kernel::Source>& second = halves[1];
  second.K = p.K - first_k;
  second.A = p.A + first_k * p.a_cs;
  second.B = p.B + first_k * p.b_rs;
  second.beta = T(0);
  second.C = second_sums.get();
  second.c_rs = p.N;
  second.bias = nullptr;
  if (threads <= 1) {
    for (const auto& half : halves) gemm_block(kernel, half, 0, half.M, 0, half.N);
  } else {
    run_grids(kernel, halves, 2, choose_grid(kernel, p.M, p.N, first_k, std::max(1, threads / 2)));
  }
  struct Sum {  // one capture (see run_grids)
    const Problem<T, typename Kernel::Source>& p;
    const T* second;
  } sum{p, second_sums.get()};
  parallel_for(0, p.M, std::max<int64_t>(1, (int64_t{1} << 14) / p.N), [&sum](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      T* row = sum.p.C + i * sum.p.c_rs;
      const T* add = sum.second + i * sum.p.N;
      for (int64_t j = 0; j < sum.p.N; ++j) row[j] += add[j];
    }
  });
}

// One product with up to `threads` threads (trivial shapes handled here, not in the kernels).
template <typename Kernel>
void gemm_one_with(const Kernel& kernel, const Problem<typename Kernel::Output, typename Kernel::Source>& p,
                   int threads) {
  using T = typename Kernel::Output;
  if (p.M <= 0 || p.N <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (p.C16 != nullptr && (p.K <= 0 || p.alpha == T(0) || p.K > kernel.kc)) {
      // A bfloat16 C whose sums would span several K blocks (or that is only the bias): summed into a
      // float32 C first, then rounded (one more pass; the recipe's products all fit one block).
      std::vector<float> sums(size_t(p.M * p.N));
      Problem<T, typename Kernel::Source> in_float = p;
      in_float.C = sums.data();
      in_float.c_rs = p.N;
      in_float.C16 = nullptr;
      gemm_one_with(kernel, in_float, threads);
      round_rows(kernel, sums.data(), p.N, p.C16, p.c_rs, p.M, p.N);
      return;
    }
  }
  if (p.K <= 0 || p.alpha == T(0)) {  // nothing to multiply: C = beta * C, A and B unread
    scale_c(p, p.C, p.c_rs, p.M, p.N, 0);
    return;
  }
  threads = std::min(threads, threads_for(p.M, p.N, p.K, threads));
  if (splits_k(kernel, p)) return gemm_split_k(kernel, p, threads);
  gemm_threaded(kernel, p, threads);
}

// A small product with at most two rows or two columns (window attention's global key, a matrix times a
// vector, a two-class head): plain loops on the calling thread. A kernel tile would be nearly all padding,
// and packing its panels would cost more than the product.
template <typename T>
bool is_thin(const Problem<T>& p) {
  return std::min(p.M, p.N) <= 2 && p.M * p.N * p.K <= (int64_t(1) << 18);
}

template <typename T>
void thin_product(const Problem<T>& p) {
  scale_c(p, p.C, p.c_rs, p.M, p.N, 0);  // C = beta C (+ bias)
  if (p.a_cs == 1 && p.b_rs == 1 && p.b_cs != 1) {  // A's rows and B's columns contiguous: dot products,
    if (p.N <= p.M)                                  // many at a time along the longer side of C
      for (int64_t n = 0; n < p.N; ++n) row_dots(p.M, p.K, p.alpha, p.A, p.a_rs, p.B + n * p.b_cs, 0, p.C + n, p.c_rs);
    else
      for (int64_t m = 0; m < p.M; ++m) row_dots(p.N, p.K, p.alpha, p.B, p.b_cs, p.A + m * p.a_rs, 0, p.C + m * p.c_rs, 1);
    return;
  }
  for (int64_t m = 0; m < p.M; ++m) {
    T* c = p.C + m * p.c_rs;
    const T* a = p.A + m * p.a_rs;
    if (p.b_cs == 1) {  // B's rows are contiguous: add alpha a_k B[k, :] to the row, k by k
      for (int64_t k = 0; k < p.K; ++k) {
        const T ak = p.alpha * a[k * p.a_cs];
        const T* b = p.B + k * p.b_rs;
        for (int64_t n = 0; n < p.N; ++n) c[n] += ak * b[n];
      }
    } else {  // one dot product per entry of C
      for (int64_t n = 0; n < p.N; ++n) {
        const T* b = p.B + n * p.b_cs;
        T sum = 0;
        for (int64_t k = 0; k < p.K; ++k) sum += a[k * p.a_cs] * b[k * p.b_rs];
        c[n] += p.alpha * sum;
      }
    }
  }
}

template <typename T>
void gemm_one(const Problem<T>& p, int threads) {
  if (p.M > 0 && p.N > 0 && p.K > 0 && p.alpha != T(0) && is_thin(p)) return thin_product(p);
  gemm_one_with(*active_kernel<T>().load(std::memory_order_relaxed), p, threads);
}

// Runs one checked product: gemm_one for the float kernels, the bfloat16 selection below for those.
template <typename T>
struct PlainRunner {
  void operator()(const Problem<T>& p, int threads) const { gemm_one(p, threads); }
};

template <typename T, typename S = T, typename Runner = PlainRunner<T>>
void gemm_any(int64_t M, int64_t N, int64_t K, T alpha, const S* A, int64_t a_rs, int64_t a_cs,
              const S* B, int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_rs, const T* bias,
              Runner run = {}) {
  EMBER_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  EMBER_CHECK(M <= 1 || c_rs >= N, "gemm: C rows overlap: row stride {} < N={}", c_rs, N);
  run(Problem<T, S>{M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, bias}, threads_here());
}

template <typename T, typename S = T, typename Runner = PlainRunner<T>>
void gemm_batched_any(int64_t batch, int64_t M, int64_t N, int64_t K, T alpha, const S* A,
                      int64_t a_bs, int64_t a_rs, int64_t a_cs, const S* B, int64_t b_bs,
                      int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_bs, int64_t c_rs,
                      Runner run = {}) {
  EMBER_CHECK(batch >= 0 && M >= 0 && N >= 0 && K >= 0,
              "gemm_batched: negative size batch={} M={} N={} K={}", batch, M, N, K);
  EMBER_CHECK(M <= 1 || c_rs >= N, "gemm_batched: C rows overlap: row stride {} < N={}", c_rs, N);
  if (batch == 0 || M == 0 || N == 0) return;
  auto product = [&](int64_t i) {
    return Problem<T, S>{M, N, K, alpha, A + i * a_bs, a_rs, a_cs, B + i * b_bs, b_rs, b_cs,
                         beta, C + i * c_bs, c_rs};
  };
  const int threads = threads_here();
  const int64_t work = batch * M * N * std::max<int64_t>(K, 1);
  // Split over the batch when every thread gets an equal share (or the imbalance is small).
  const bool split_batch = threads > 1 && work >= 2 * kMinWorkPerThread &&
                           (batch % threads == 0 || batch >= 4 * threads);
  if (split_batch) {
    using Product = decltype(product);
    struct Work {
      Product& make;
      Runner& run;
    } work_ref{product, run};
    parallel_for(0, batch, 1, [&work_ref](int64_t first, int64_t last) {  // one capture: no allocation
      for (int64_t i = first; i < last; ++i) work_ref.run(work_ref.make(i), 1);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) run(product(i), threads);
  }
}

// ---------------------------------------------------------------------------------------------
// The bfloat16 GEMM: vdpbf16ps where the CPU has it and it out-runs the FMA, else the float kernel on rounded
// operands.

// Which bfloat16 kernel runs. NOTE: AMX is chosen only by name until it has run on a CPU that has it
// (this machine's has not). "auto" is resolved once, on first use (auto_bf16_choice).
enum class Bf16Choice { Auto, Amx, AmxEmulated, Avx512Bf16, Rounded };
std::atomic<Bf16Choice> bf16_choice{Bf16Choice::Auto};
constexpr std::pair<std::string_view, Bf16Choice> kBf16Names[] = {{"auto", Bf16Choice::Auto},
                                                                  {"rounded", Bf16Choice::Rounded},
                                                                  {"avx512_bf16", Bf16Choice::Avx512Bf16},
                                                                  {"amx", Bf16Choice::Amx},
                                                                  {"amx_emulated", Bf16Choice::AmxEmulated}};

template <typename S>
const detail::GemmKernel<S, uint16_t, float>* native_bf16_kernel(Bf16Choice choice);

// "auto": the kernel EMBER_BF16_KERNEL names, if set; else vdpbf16ps where the CPU has it and it does at least
// as many multiply-adds per second as the float FMA (two short loops, about a millisecond, the first time),
// else the rounded kernel. Not every CPU with the instruction runs it fast: measured by bench/matmul.sh --bf16's
// peaks, an AMD Zen-class core ran vdpbf16ps at 2x to 2.7x its FMA's multiply-adds, an Intel Xeon (model 207,
// no AMX) at 0.48x, where the rounded kernel is the faster (docs/performance.md).
Bf16Choice auto_bf16_choice() {
  static const Bf16Choice choice = [] {
    if (const char* env = std::getenv("EMBER_BF16_KERNEL"); env != nullptr && *env != '\0') {
      for (const auto& [name, named] : kBf16Names) {
        if (name != env || named == Bf16Choice::Auto) continue;
        EMBER_CHECK(named == Bf16Choice::Rounded || native_bf16_kernel<float>(named) != nullptr,
                    "EMBER_BF16_KERNEL={}: this CPU cannot run that kernel", env);
        return named;
      }
      if (std::string_view(env) != "auto")
        throw Error(fmt::format("EMBER_BF16_KERNEL={}: unknown kernel; expected auto, avx512_bf16, amx, "
                                "amx_emulated or rounded", env));
    }
    if (detail::avx512_bf16_kernel<float>() == nullptr) return Bf16Choice::Rounded;
    return gemm_bf16_rate_ratio() >= 1.0 ? Bf16Choice::Avx512Bf16 : Bf16Choice::Rounded;
  }();
  return choice;
}

template <typename S>
const detail::GemmKernel<S, uint16_t, float>* native_bf16_kernel(Bf16Choice choice) {
  switch (choice) {
    case Bf16Choice::Auto: return native_bf16_kernel<S>(auto_bf16_choice());
    case Bf16Choice::Avx512Bf16: return detail::avx512_bf16_kernel<S>();
    case Bf16Choice::Amx: return detail::amx_bf16_kernel<S>();
    case Bf16Choice::AmxEmulated: return detail::amx_bf16_emulated_kernel<S>();
    case Bf16Choice::Rounded: return nullptr;
  }
  return nullptr;
}

template <typename S>
struct Bf16Runner {
  void operator()(const Problem<float, S>& p, int threads) const {
    if (const auto* kernel = native_bf16_kernel<S>(bf16_choice.load(std::memory_order_relaxed)))
      return gemm_one_with(*kernel, p, threads);
    const auto* kernel = detail::rounded_bf16_kernel<S>(*active_kernel<float>().load(std::memory_order_relaxed));
    EMBER_CHECK(kernel != nullptr, "gemm_bf16: no bfloat16 packing for the float kernel '{}'",
                active_kernel<float>().load()->name);
    gemm_one_with(*kernel, p, threads);
  }
};

}  // namespace

void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
               const float* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs, const float* bias) {
  gemm_any(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, bias, Bf16Runner<float>{});
}
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_rs, int64_t a_cs,
               const BFloat16* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs, const float* bias) {
  gemm_any(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, bias, Bf16Runner<BFloat16>{});
}
template <typename S>
void gemm_bf16_out(int64_t M, int64_t N, int64_t K, float alpha, const S* A, int64_t a_rs, int64_t a_cs, const S* B,
                   int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs, const float* bias) {
  EMBER_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative size M={} N={} K={}", M, N, K);
  EMBER_CHECK(M <= 1 || c_rs >= N, "gemm_bf16: C rows overlap: row stride {} < N={}", c_rs, N);
  Problem<float, S> p{M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, 0.0f, nullptr, c_rs, bias};
  p.C16 = C;
  Bf16Runner<S>{}(p, threads_here());
}

void gemm_bf16_pair_major(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_ps,
                          const BFloat16* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs) {
  EMBER_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16_pair_major: negative size M={} N={} K={}", M, N, K);
  EMBER_CHECK(M <= 1 || c_rs >= N, "gemm_bf16_pair_major: C rows overlap: row stride {} < N={}", c_rs, N);
  EMBER_CHECK(K <= 2 || (a_ps % 2 == 0 && a_ps >= 2 * M),
              "gemm_bf16_pair_major: A's pair stride {} must be even and at least 2 M = {}", a_ps, 2 * M);
  const auto* kernel = native_bf16_kernel<BFloat16>(bf16_choice.load(std::memory_order_relaxed));
  if (kernel != nullptr && kernel->tile_direct != nullptr && N <= kernel->nr) {  // read in place
    Problem<float, BFloat16> p{M, N, K, alpha, A, 2, a_ps / 2, B, b_rs, b_cs, 0.0f, nullptr, c_rs};
    p.C16 = C;
    p.a_pairs = true;
    return gemm_one_with(*kernel, p, threads_here());
  }
  // Another kernel (the rounded one, AMX) or a B wider than one micro-panel: A de-interleaved first, each
  // pair run into two columns of a column-major copy (both sides read and written in order, into this
  // thread's workspace), which the kernel then packs as it packs any A.
  BFloat16* columns = thread_workspace().columns.get<BFloat16>(M * K);
  for (int64_t k = 0; k < K; k += 2) {
    const BFloat16* pairs = A + k / 2 * a_ps;
    BFloat16* even = columns + k * M;
    if (k + 1 < K) {
      BFloat16* odd = even + M;
      for (int64_t i = 0; i < M; ++i) even[i] = pairs[2 * i], odd[i] = pairs[2 * i + 1];
    } else {
      for (int64_t i = 0; i < M; ++i) even[i] = pairs[2 * i];
    }
  }
  gemm_bf16_out(M, N, K, alpha, columns, int64_t{1}, std::max<int64_t>(M, 1), B, b_rs, b_cs, C, c_rs,
                static_cast<const float*>(nullptr));
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
               const float* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs, const float* bias) {
  gemm_bf16_out(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, C, c_rs, bias);
}
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_rs, int64_t a_cs,
               const BFloat16* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs, const float* bias) {
  gemm_bf16_out(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, C, c_rs, bias);
}
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_bs,
                       int64_t a_rs, int64_t a_cs, const float* B, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                       float beta, float* C, int64_t c_bs, int64_t c_rs) {
  gemm_batched_any(batch, M, N, K, alpha, A, a_bs, a_rs, a_cs, B, b_bs, b_rs, b_cs, beta, C, c_bs, c_rs,
                   Bf16Runner<float>{});
}
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                       int64_t a_bs, int64_t a_rs, int64_t a_cs, const BFloat16* B, int64_t b_bs, int64_t b_rs,
                       int64_t b_cs, float beta, float* C, int64_t c_bs, int64_t c_rs) {
  gemm_batched_any(batch, M, N, K, alpha, A, a_bs, a_rs, a_cs, B, b_bs, b_rs, b_cs, beta, C, c_bs, c_rs,
                   Bf16Runner<BFloat16>{});
}

const char* gemm_bf16_kernel_name() {
  const auto* kernel = native_bf16_kernel<float>(bf16_choice.load());
  return kernel != nullptr ? kernel->name : "rounded";
}

bool set_gemm_bf16_kernel(const char* name) {
  const std::string_view wanted = name == nullptr ? "auto" : name;
  for (const auto& [known, choice] : kBf16Names) {
    if (wanted != known) continue;
    const bool needs_kernel = choice != Bf16Choice::Auto && choice != Bf16Choice::Rounded;
    if (needs_kernel && native_bf16_kernel<float>(choice) == nullptr) return false;  // this CPU lacks it
    bf16_choice = choice;
    return true;
  }
  return false;
}

double gemm_bf16_rate_ratio() {
  static const double ratio = detail::avx512_bf16_rate_ratio();
  return ratio;
}

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
          const float* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs,
          const float* bias) {
  gemm_any(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, bias);
}

void gemm(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t a_rs,
          int64_t a_cs, const double* B, int64_t b_rs, int64_t b_cs, double beta, double* C,
          int64_t c_rs, const double* bias) {
  gemm_any(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, bias);
}

void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t a_bs, int64_t a_rs, int64_t a_cs, const float* B, int64_t b_bs,
                  int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_bs, int64_t c_rs) {
  gemm_batched_any(batch, M, N, K, alpha, A, a_bs, a_rs, a_cs, B, b_bs, b_rs, b_cs, beta, C, c_bs,
                   c_rs);
}

void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t a_bs, int64_t a_rs, int64_t a_cs, const double* B, int64_t b_bs,
                  int64_t b_rs, int64_t b_cs, double beta, double* C, int64_t c_bs,
                  int64_t c_rs) {
  gemm_batched_any(batch, M, N, K, alpha, A, a_bs, a_rs, a_cs, B, b_bs, b_rs, b_cs, beta, C, c_bs,
                   c_rs);
}

const char* gemm_float_kernel_name() { return active_kernel<float>().load()->name; }

bool set_gemm_kernel(const char* name) {
  std::string_view wanted = name == nullptr ? "auto" : name;
  const GemmKernel<float>* float_kernel = nullptr;
  const GemmKernel<double>* double_kernel = nullptr;
  if (wanted == "auto") {
    float_kernel = best_kernel<float>();
    double_kernel = best_kernel<double>();
  } else if (wanted == "avx512") {
    float_kernel = detail::avx512_float_kernel();
    double_kernel = detail::avx512_double_kernel();
  } else if (wanted == "avx2") {
    float_kernel = detail::avx2_float_kernel();
    double_kernel = detail::generic_double_kernel();
  } else if (wanted == "neon") {
    float_kernel = detail::neon_float_kernel();
    double_kernel = detail::generic_double_kernel();
  } else if (wanted == "generic") {
    float_kernel = detail::generic_float_kernel();
    double_kernel = detail::generic_double_kernel();
  }
  if (float_kernel == nullptr || double_kernel == nullptr) return false;
  active_kernel<float>().store(float_kernel);
  active_kernel<double>().store(double_kernel);
  return true;
}

}  // namespace ember::cpu
