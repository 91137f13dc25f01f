// The CPU's embedding kernels (declared in core/kernels.h): the forward copies rows of the weight;
// the backward adds each vocabulary row's gradient from its positions in position order. Each
// thread owns whole rows, so repeated ids add up without races and in the same order whatever the
// thread count (the GPU's order too, cuda/embedding_kernels.cu).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {

void embedding_forward(const On& on, const void* weight, int64_t w_rs, int64_t w_cs, const int64_t* ids, int64_t n,
                       int64_t D, void* out) {
  const Dtype dtype = Dtype(on.dtype);
  const int64_t item = dtype_size(dtype);
  const char* w = static_cast<const char*>(weight);
  char* o = static_cast<char*>(out);
  dispatch_all(dtype, "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(0, n, std::max<int64_t>(1, 32768 / std::max<int64_t>(D, 1)), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const char* row = w + ids[i] * w_rs * item;
        char* dst = o + i * D * item;
        if (w_cs == 1 || D <= 1) {
          if (D > 0) std::memcpy(dst, row, size_t(D * item));
        } else {
          for (int64_t j = 0; j < D; ++j)
            reinterpret_cast<T*>(dst)[j] = *reinterpret_cast<const T*>(row + j * w_cs * item);
        }
      }
    });
  });
}

void embedding_backward(const On& on, const void* grad, const int64_t* rows, const int64_t* starts,
                        const int64_t* positions, int64_t nrows, int64_t D, void* dweight, const int64_t* count) {
  if (count != nullptr) nrows = std::min(nrows, *count);
  const int64_t n = nrows > 0 ? starts[nrows] : 0;  // the positions bucketed
  dispatch_floating(Dtype(on.dtype), "embedding backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(grad);
    T* dw = static_cast<T*>(dweight);
    const int64_t per_row = std::max<int64_t>(1, D * n / std::max<int64_t>(nrows, 1));
    parallel_for(0, nrows, std::max<int64_t>(1, 16384 / per_row), [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        T* dst = dw + rows[k] * D;
        for (int64_t p = starts[k]; p < starts[k + 1]; ++p) {
          const T* in = g + positions[p] * D;
          for (int64_t j = 0; j < D; ++j) dst[j] += in[j];
        }
      }
    });
  });
}

}  // namespace ember::cpu
