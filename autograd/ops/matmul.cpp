// Matrix products. matmul reduces every case (2-D, batched with broadcast batch dims, 1-D
// operands like NumPy) to calls of the strided batched kernel::matmul (core/kernels.h; CPU:
// core/cpu/products.cpp on core/cpu/gemm.h's GEMM, GPU: cuda/blas.cu on cuBLAS): operands are passed
// with their own strides (a transpose is free), batch dims are walked by stride, and a batch
// multiplied by one shared matrix is folded into a single tall GEMM.
//
// Backward of C = A @ B: dA = dC @ B^T, dB = A^T @ dC (B^T, A^T are views), summed over the
// batch dims the operand was broadcast along.
// Mixed precision (core/precision.h): in a bfloat16 scope float32 operands are multiplied as
// bfloat16 (kernel::matmul's bf16: cpu::gemm_bf16, cuda::gemm_bf16), forward and backward; bfloat16 tensors
// go that way too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

// The last two dims of an operand as the GEMM sees them: A(i, j) = data[i * rs + j * cs].
struct MatrixLayout {
  int64_t rows, cols, rs, cs;
};

MatrixLayout matrix_layout(const Tensor& x) {
  const size_t n = x.shape().size();
  MatrixLayout m{x.shape()[n - 2], x.shape()[n - 1], x.strides()[n - 2], x.strides()[n - 1]};
  // The stride of a size-1 dim never moves the pointer: pick the one that makes the layout
  // plainly row- or column-major, so the packing routines take their unit-stride paths.
  if (m.rows <= 1) m.rs = m.cs == 1 ? std::max<int64_t>(m.cols, 1) : 1;
  if (m.cols <= 1) m.cs = m.rs == 1 ? std::max<int64_t>(m.rows, 1) : 1;
  return m;
}

// True when the device's GEMM (kernel::matmul_reads) should not read x's last two dims in place: cuBLAS
// needs unit stride along one and a valid leading dim along the other; the CPU's reads any strides, but
// packing an operand with no unit stride (say, every other column of a matrix) gathers element by element.
bool needs_copy(const Tensor& x, const MatmulReads& reads) {
  const MatrixLayout m = matrix_layout(x);
  if (!reads.leading_dim) return m.rs != 1 && m.cs != 1;
  return !((m.cs == 1 && m.rs >= std::max<int64_t>(m.cols, 1)) || (m.rs == 1 && m.cs >= std::max<int64_t>(m.rows, 1)));
}

// One GEMM, or a strided batch of them, on the operands' device (kernel::matmul).
// bf16: float operands multiplied as bfloat16 (mixed precision).
template <typename T>
void gemm_batched_on(const On& on, bool bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_bs,
                     int64_t a_rs, int64_t a_cs, const T* B, int64_t b_bs, int64_t b_rs, int64_t b_cs, T* C,
                     int64_t c_bs, int64_t ldc) {
  kernel::matmul(on, bf16, batch, M, N, K, static_cast<const void*>(A), a_bs, a_rs, a_cs, static_cast<const void*>(B),
                 b_bs, b_rs, b_cs, static_cast<void*>(C), c_bs, ldc);
}
template <typename T>
void gemm_on(const On& on, bool bf16, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs,
             const T* B, int64_t b_rs, int64_t b_cs, T* C, int64_t ldc) {
  gemm_batched_on(on, bf16, 1, M, N, K, A, 0, a_rs, a_cs, B, 0, b_rs, b_cs, C, 0, ldc);
}

// One batch dim after merging: its size and each operand's element stride along it (0 = broadcast).
struct BatchDim {
  int64_t size, a, b, c;
};

// C's batch dims, innermost last, with size-1 dims dropped and mergeable neighbours merged: the
// batch a strided GEMM walks with one stride per operand. A and B are at least 2-D; their batch
// dims broadcast to C's.
std::vector<BatchDim> batch_dims(const Tensor& a, const Tensor& b, const Tensor& c) {
  const size_t nbatch = c.shape().size() - 2;
  std::vector<BatchDim> dims;
  auto stride_of = [nbatch](const Tensor& x, size_t d) -> int64_t {
    size_t lead = nbatch - (x.shape().size() - 2);  // x's batch dims are right-aligned
    if (d < lead) return 0;
    return x.shape()[d - lead] == 1 ? 0 : x.strides()[d - lead];
  };
  for (size_t d = 0; d < nbatch; ++d) {
    int64_t size = c.shape()[d];
    if (size == 1) continue;
    BatchDim dim{size, stride_of(a, d), stride_of(b, d), c.strides()[d]};
    if (!dims.empty()) {
      BatchDim& outer = dims.back();
      if (outer.a == dim.a * size && outer.b == dim.b * size && outer.c == dim.c * size) {
        outer = {outer.size * size, dim.a, dim.b, dim.c};
        continue;
      }
    }
    dims.push_back(dim);
  }
  return dims;
}

// C [batch..., M, N] (contiguous) = A [.., M, K] @ B [.., K, N].
template <typename T>
void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool bf16) {
  const MatrixLayout la = matrix_layout(a), lb = matrix_layout(b);
  const int64_t M = la.rows, K = la.cols, N = lb.cols;
  if (c.numel() == 0) return;
  std::vector<BatchDim> dims = batch_dims(a, b, c);

  const T* A = a.data<T>();
  const T* B = b.data<T>();
  T* C = c.data<T>();
  const On on = kernel_on(c);
  if (dims.empty()) {
    gemm_on(on, bf16, M, N, K, A, la.rs, la.cs, B, lb.rs, lb.cs, C, N);
    return;
  }
  // One shared B and A's batch laid out like extra rows: a single [batch*M, K] @ [K, N] product.
  // (With a leading dim (cuBLAS) only for a row-major A: one leading dimension for the tall matrix.)
  if (dims.size() == 1 && dims[0].b == 0 && (M == 1 || dims[0].a == M * la.rs) &&
      (!kernel::matmul_reads(on).leading_dim || la.cs == 1)) {
    int64_t a_rs = M == 1 ? dims[0].a : la.rs;
    gemm_on(on, bf16, dims[0].size * M, N, K, A, a_rs, la.cs, B, lb.rs, lb.cs, C, N);
    return;
  }
  // The innermost batch dim goes to gemm_batched; outer ones are walked like an odometer.
  const BatchDim inner = dims.back();
  dims.pop_back();
  int64_t outer_count = 1;
  for (const BatchDim& d : dims) outer_count *= d.size;
  std::vector<int64_t> index(dims.size(), 0);
  int64_t a_off = 0, b_off = 0, c_off = 0;
  for (int64_t o = 0; o < outer_count; ++o) {
    gemm_batched_on(on, bf16, inner.size, M, N, K, A + a_off, inner.a, la.rs, la.cs, B + b_off, inner.b, lb.rs, lb.cs,
                    C + c_off, inner.c, N);
    for (size_t d = dims.size(); d-- > 0;) {
      a_off += dims[d].a;
      b_off += dims[d].b;
      c_off += dims[d].c;
      if (++index[d] < dims[d].size) break;
      a_off -= dims[d].a * dims[d].size;
      b_off -= dims[d].b * dims[d].size;
      c_off -= dims[d].c * dims[d].size;
      index[d] = 0;
    }
  }
}

Shape batch_shape(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); }

Tensor matmul_nd(const Tensor& a, const Tensor& b);

// x @ y, computed so that the result's last two dims are column-major when `col_major`
// (as (y^T @ x^T)^T): a gradient laid out like its (transposed) operand needs no copy later.
Tensor product(const Tensor& x, const Tensor& y, bool col_major) {
  if (col_major) return matmul_nd(y.transpose(-1, -2), x.transpose(-1, -2)).transpose(-1, -2);
  return matmul_nd(x, y);
}

bool is_col_major(const Tensor& x) {
  MatrixLayout m = matrix_layout(x);
  return m.rs == 1 && m.cs != 1 && m.rows > 1 && m.cols > 1;
}

// Gradient of the left operand: dA = dC @ B^T summed to A's shape. When A has no batch of its own
// but B does, this materialises dC @ B^T per batch before summing (a rare case: vector @ batch).
Tensor grad_left(const Tensor& g, const Tensor& b, const Shape& a_shape, bool col_major) {
  return sum_to(product(g, b.transpose(-1, -2), col_major), a_shape);
}

// Gradient of the right operand: dB = A^T @ dC. When B is one matrix shared by a batch of A's,
// the batch folds into K: dB = A_flat^T @ dC_flat, a single GEMM instead of a batch and a sum.
Tensor grad_right(const Tensor& g, const Tensor& a, const Shape& b_shape, bool col_major) {
  const int64_t K = a.shape().back(), N = g.shape().back();
  const int64_t b_batch = numel(Shape(b_shape.begin(), b_shape.end() - 2));
  const int64_t g_batch = numel(batch_shape(g));
  if (b_batch == 1 && g_batch > 1 && numel(batch_shape(a)) == g_batch) {
    Tensor a_flat = a.reshape({-1, K}), g_flat = g.reshape({-1, N});
    return product(a_flat.transpose(0, 1), g_flat, col_major).reshape(b_shape);
  }
  return sum_to(product(a.transpose(-1, -2), g, col_major), b_shape);
}

// Both operands at least 2-D, inner dims already checked.
Tensor matmul_nd(const Tensor& a_in, const Tensor& b_in) {
  Shape batch = broadcast_shapes(batch_shape(a_in), batch_shape(b_in), "matmul");
  Shape out_shape = batch;
  out_shape.push_back(a_in.shape()[a_in.shape().size() - 2]);
  out_shape.push_back(b_in.shape().back());
  Tensor out = Tensor::empty(out_shape, a_in.dtype(), a_in.device());
  const bool bf16 = product_precision() == Precision::BFloat16 && a_in.dtype() == Dtype::Float32;
  {
    // Only an operand the device's GEMM cannot read well in place is copied (never a plain transpose).
    const MatmulReads reads = kernel::matmul_reads(kernel_on(out));
    Tensor a = needs_copy(a_in, reads) ? a_in.detach().contiguous() : a_in;
    Tensor b = needs_copy(b_in, reads) ? b_in.detach().contiguous() : b_in;
    // Where each call costs the host microseconds (cuBLAS), batch dims that do not merge into one
    // strided batch (the heads of a [B, T, H, Dh] view, say) would take one call per outer index,
    // so the operands are copied contiguous instead and one batched call does the whole product.
    if (reads.one_call && out.numel() > 0 && batch_dims(a, b, out).size() > 1) {
      a = a.detach().contiguous();
      b = b.detach().contiguous();
    }
    dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      matmul_kernel<T>(a, b, out, bf16);
    });
  }
  const bool need_a = a_in.requires_grad(), need_b = b_in.requires_grad();
  record("matmul", out, {a_in, b_in},
         [a = need_b ? save(a_in) : SavedTensor(), b = need_a ? save(b_in) : SavedTensor(), sa = a_in.shape(),
          sb = b_in.shape(), col_a = is_col_major(a_in), col_b = is_col_major(b_in), bf16](const Tensor& g) -> Grads {
           MixedPrecisionGuard precision(bf16 ? Precision::BFloat16 : Precision::Float32);  // as the forward
           return {b.defined() ? grad_left(g, b.get(), sa, col_a) : Tensor(),
                   a.defined() ? grad_right(g, a.get(), sb, col_b) : Tensor()};
         });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device("matmul", {&a, &b});
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: {} @ {}: both operands need at least 1 dim (got a 0-dim tensor)",
              shape_str(a.shape()), shape_str(b.shape()));
  EMBER_CHECK(a.dtype() == b.dtype(), "matmul: {} @ {}: dtypes differ ({} and {})", shape_str(a.shape()),
              shape_str(b.shape()), dtype_name(a.dtype()), dtype_name(b.dtype()));
  if (a.dtype() == Dtype::BFloat16) {  // bfloat16 in, bfloat16 out: float32 values, multiplied in bfloat16
    MixedPrecisionGuard bf16(Precision::BFloat16);
    return matmul(a.to(Dtype::Float32), b.to(Dtype::Float32)).to(Dtype::BFloat16);
  }
  const int64_t ka = a.shape().back();
  const int64_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.shape().size() - 2];
  EMBER_CHECK(ka == kb, "matmul: {} @ {}: inner dimensions {} and {} differ", shape_str(a.shape()),
              shape_str(b.shape()), ka, kb);
  if (a.dim() >= 2 && b.dim() >= 2) {
    if (a.dim() > 2 || b.dim() > 2) {
      // Batch dims must broadcast; say so with both full shapes.
      Shape ba = batch_shape(a), bb = batch_shape(b);
      for (size_t i = 1; i <= std::min(ba.size(), bb.size()); ++i) {
        int64_t x = ba[ba.size() - i], y = bb[bb.size() - i];
        EMBER_CHECK(x == y || x == 1 || y == 1, "matmul: {} @ {}: batch dimensions {} and {} do not broadcast",
                    shape_str(a.shape()), shape_str(b.shape()), shape_str(ba), shape_str(bb));
      }
    }
    return matmul_nd(a, b);
  }
  // NumPy rules: a 1-D left operand is a row [1, K], a 1-D right one a column [K, 1]; the added
  // dim is removed from the result. Both 1-D: a dot product, 0-dim.
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor out = matmul(a2, b2);
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(-1 - (b.dim() == 1 ? 0 : 1));
  return out;
}

}  // namespace ember
