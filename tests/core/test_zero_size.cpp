// Zero-size dims through every op on the CPU: the table of tests/zero_size_cases.h, forward and backward.
#include "tests/zero_size_cases.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("zero-size dims: every op gives a result of the right shape or a clear error, forward and backward (CPU)") {
  run_zero_size_cases(Device::cpu());
}
