// Random tensors. Element i of a draw is a pure function of (seed, first + i), so values do
// not depend on how many threads fill the tensor.
#include <cmath>
#include <cstdint>

#include "autograd/ops/op_support.h"


namespace ember {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

namespace {

// Fills a contiguous floating tensor with element i of a uniform (normal = false) or normal draw
// (core/random.h), on its device (kernel::random_fill, core/kernels.h); `first` is the first index
// of the generator's range.
void fill_random(Tensor& t, const char* op, bool normal, uint64_t seed, uint64_t first, double a, double b) {
  EMBER_CHECK(t.is_contiguous(), "{}: the tensor must be contiguous", op);
  EMBER_CHECK(is_floating(t.dtype()), "{}: needs a floating tensor, got {}", op, dtype_name(t.dtype()));
  t.bump_version();
  kernel::random_fill(kernel_on(t), t.raw_data(), t.numel(), normal, seed, first, a, b);
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator& gen) {
  uint64_t seed = gen.seed(), first = gen.take(uint64_t(t.numel()));
  fill_random(t, "uniform_", false, seed, first, low, high);
  return t;
}

// Box-Muller takes two uniforms per element: the range is 2 numel long.
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  uint64_t seed = gen.seed(), first = gen.take(2 * uint64_t(t.numel()));
  fill_random(t, "normal_", true, seed, first, mean, std);
  return t;
}

Tensor uniform(const Shape& shape, double low, double high, Generator& gen, Dtype dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  return uniform_(t, low, high, gen);
}
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, Dtype dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  return normal_(t, mean, std, gen);
}
Tensor rand(const Shape& shape, Generator& gen, Dtype dtype) { return uniform(shape, 0.0, 1.0, gen, dtype); }
Tensor randn(const Shape& shape, Generator& gen, Dtype dtype) { return normal(shape, 0.0, 1.0, gen, dtype); }

}  // namespace ember
