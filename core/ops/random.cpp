// Random tensors. Element i of a draw is a pure function of (seed, first + i), so values do
// not depend on how many threads fill the tensor.
#include <cmath>

#include "core/ops.h"
#include "core/parallel.h"

namespace ember {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

namespace {

// Fills a contiguous floating tensor with value(i) for element i.
template <typename ValueFn>
void fill_indexed(Tensor& t, const char* op, ValueFn value) {
  check_cpu(op, t);
  EMBER_CHECK(t.is_contiguous(), "{}: the tensor must be contiguous", op);
  dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    parallel_for(0, t.numel(), 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(value(i));
    });
  });
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator& gen) {
  uint64_t seed = gen.seed(), first = gen.take(uint64_t(t.numel()));
  fill_indexed(t, "uniform_", [=](int64_t i) { return low + (high - low) * random_uniform(seed, first + i); });
  return t;
}

// Box-Muller: two uniforms per element (indices 2i, 2i+1 of the range), one normal out.
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  uint64_t seed = gen.seed(), first = gen.take(2 * uint64_t(t.numel()));
  fill_indexed(t, "normal_", [=](int64_t i) {
    double u1 = 1.0 - random_uniform(seed, first + 2 * i);  // (0, 1]: log is finite
    double u2 = random_uniform(seed, first + 2 * i + 1);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
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
