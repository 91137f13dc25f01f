// The dims a strided loop walks, simplified once before the loop: dims of size 1 are dropped (they
// never move a pointer), and each dim is merged into the one outside it wherever every operand
// steps over both as one (outer stride == inner stride * inner size), so [a, b] becomes [a * b].
// A contiguous tensor ends as one flat dim; a broadcast keeps only the dims it needs. The elements
// and their order do not change. Used by the CPU's loop (core/cpu/loops.h) and before every GPU
// element-wise launch (cuda/elementwise_kernels.cu); plain C++17, so the .cu files include it.
#pragma once
#include <cstdint>

namespace ember {

// In place over sizes[0, ndim) and, for each of the `count` operands, strides[k][0, ndim) (in any
// unit: elements or bytes). Returns the new number of dims (0 when every dim had size 1).
inline int merge_dims(int ndim, int64_t* sizes, int64_t* const* strides, int count) {
  int kept = 0;
  for (int d = 0; d < ndim; ++d) {
    const int64_t size = sizes[d];
    if (size == 1) continue;
    bool merges = kept > 0;
    for (int k = 0; k < count && merges; ++k) merges = strides[k][kept - 1] == strides[k][d] * size;
    if (merges) {
      sizes[kept - 1] *= size;
      for (int k = 0; k < count; ++k) strides[k][kept - 1] = strides[k][d];
    } else {
      sizes[kept] = size;
      for (int k = 0; k < count; ++k) strides[k][kept] = strides[k][d];
      ++kept;
    }
  }
  return kept;
}

}  // namespace ember
