// Resource errors: shapes too large to count, to exist on any machine, or to fit in this one's
// memory are clear ember::Errors naming the shape or the size, never a crash or a wrapped count.
#include <cstdint>

#include "autograd/ops.h"
#include "tests/helpers.h"

using namespace ember;
using ember::testing::check_error;

TEST_CASE("resources: a shape larger than any machine's memory names the shape and the size") {
  check_error([] { zeros({int64_t(1) << 40, int64_t(1) << 20}); }, "shape [1099511627776, 1048576] of float32 is too large to allocate");
  check_error([] { zeros({int64_t(1) << 40, int64_t(1) << 20}); }, "1152921504606846976 elements x 4 bytes is more than the 64 TiB");
  check_error([] { Tensor::empty({int64_t(1) << 45}, Dtype::Float64); }, "[35184372088832]");
}

TEST_CASE("resources: element counts that overflow 64 bits are errors, not wrapped numbers") {
  // 2^40 * 2^40 = 2^80: a wrapped product would be 0 and allocate nothing.
  check_error([] { zeros({int64_t(1) << 40, int64_t(1) << 40}); },
              "shape [1099511627776, 1099511627776] has more elements than a 64-bit count can hold");
  check_error([] { ones({3, int64_t(1) << 62}); }, "more elements than a 64-bit count");
  check_error([] { ones({1}).expand({int64_t(1) << 40, int64_t(1) << 40}); }, "more elements than a 64-bit count");
  // A zero size makes a shape empty, but the other sizes must still multiply without overflow
  // (strides and loops multiply them).
  Tensor empty = zeros({0, int64_t(1) << 30, int64_t(1) << 30});
  CHECK(empty.numel() == 0);
  CHECK(sum(empty).item<float>() == 0.0f);
  check_error([] { zeros({0, int64_t(1) << 62, int64_t(1) << 62}); }, "more elements than a 64-bit count");
}

TEST_CASE("resources: more memory than this machine has is an out-of-memory error naming the size") {
  // 16 TiB: below the "no machine has it" limit, so the allocator really asks the system.
  // (Under AddressSanitizer this needs ASAN_OPTIONS=allocator_may_return_null=1, which the
  // sanitizer configuration of scripts/test.sh sets.)
  check_error([] { Tensor::empty({int64_t(1) << 42}, Dtype::Float32); }, "out of CPU memory: cannot allocate 16.0 TiB");
  // The allocator still works afterwards.
  CHECK(sum(ones({1000})).item<float>() == 1000.0f);
}
