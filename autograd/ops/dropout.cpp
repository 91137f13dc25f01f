// Dropout: y = x * keep / (1 - p), keep drawn per element from the counter-based RNG.
//
// Element i (row-major) is kept iff random_uniform(seed, first + i) >= p, where (seed, first)
// is the range this call takes from the generator. The mask is a pure function of (seed,
// first, i): the result is the same for any thread count, and backward regenerates the mask
// instead of saving it (no memory kept per element).
//
// Under data parallelism (the generator's batch_slice(), core/random.h) x holds rows
// [first_row, first_row + rows) of a batch of batch_rows along dim 0: the call takes the whole
// batch's range and uses its rows' part, so element i of global row r gets the number a single
// process running the whole batch would give it.
//
// p == 0 or !training: returns x itself (no copy, the generator is not advanced).
// p == 1: every element is dropped; the result (and gradient) is all zeros.
#include <cmath>
#include <cstdint>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// random_uniform(seed, index) >= p  <=>  (random_bits >> 11) >= ceil(p * 2^53): both sides are
// exact (a 53-bit integer, and p scaled by a power of two), so an integer compare is the same test.
uint64_t keep_threshold(double p) { return uint64_t(std::ceil(std::ldexp(p, 53))); }

// x * keep / (1 - p), contiguous (kernel::dropout_mask, core/kernels.h): the same hash of the same
// (seed, index) on every device, so the same mask. With `state` (a CUDA graph's step,
// Generator::set_device_state), the seed is state[0] and `first` counts from state[1].
Tensor masked_scale(const Tensor& x, uint64_t seed, uint64_t first, double p, const uint64_t* state) {
  Tensor in = x.detach().contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel::dropout_mask(kernel_on(x), in.raw_data(), out.raw_data(), x.numel(), seed, first, keep_threshold(p),
                       p < 1.0 ? 1.0 / (1.0 - p) : 0.0, state);
  return out;
}

// The first index of x's numbers: a fresh range of x.numel(), or x's rows' part of the range of
// the whole batch when the generator holds a slice of one.
uint64_t take_range(const Tensor& x, Generator& gen) {
  const BatchSlice& slice = gen.batch_slice();
  if (slice.batch_rows == 0) return gen.take(uint64_t(x.numel()));
  EMBER_CHECK(x.dim() >= 1 && x.size(0) == slice.rows,
              "dropout: the generator holds rows [{}, {}) of a batch of {} (data parallelism), but the input has "
              "shape {}: its dim 0 must be those {} rows", slice.first_row, slice.first_row + slice.rows,
              slice.batch_rows, shape_str(x.shape()), slice.rows);
  int64_t per_row = 1;
  for (int64_t d = 1; d < x.dim(); ++d) per_row *= x.size(d);
  return gen.take(uint64_t(slice.batch_rows * per_row)) + uint64_t(slice.first_row * per_row);
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got {}", p);
  EMBER_CHECK(is_real(x.dtype()), "dropout: expected a floating tensor (float32, float64 or bfloat16), got {}",
              dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  const uint64_t seed = gen.seed();
  uint64_t first = take_range(x, gen);
  // NOTE: in a CUDA graph's step the kernels read the seed and the step's first offset on the GPU
  // (a replay's, not the capture's); `first` is then the offset within the step.
  // The generator's device state is GPU memory: a CPU tensor's kernel reads the host's numbers.
  const uint64_t* state = kernel_on(x).cpu() ? nullptr : gen.device_state();
  if (state != nullptr) first -= gen.device_step_offset();
  Tensor out = masked_scale(x, seed, first, p, state);
  // d/dx = mask * scale: the same pass over the gradient with the same (seed, first).
  record("dropout", out, {x},
         [seed, first, p, state](const Tensor& g) -> Grads { return {masked_scale(g, seed, first, p, state)}; });
  return out;
}

}  // namespace ember
