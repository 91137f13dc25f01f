// The CPU's random fill (declared in core/kernels.h): data[i] = element i of a uniform or normal draw
// whose range starts at `first`, core/random.h's uniform_element / normal_element (the GPU's too).
// Determinism: element i is a pure function of (seed, first + i), so the tensor is the same for any
// thread count and on either device; computed in double, rounded once to the tensor's type.
#include <cstdint>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ember::cpu {

void random_fill(const On& on, void* data, int64_t n, bool normal, uint64_t seed, uint64_t first, double a,
                 double b) {
  dispatch_floating(Dtype(on.dtype), normal ? "normal_" : "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(data);
    parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        p[i] = static_cast<T>(normal ? normal_element(seed, first, uint64_t(i), a, b)
                                     : uniform_element(seed, first, uint64_t(i), a, b));
    });
  });
}

}  // namespace ember::cpu
