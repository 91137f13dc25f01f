// Test helpers: compare tensors with known numbers, run gradcheck, expect error messages.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "core/ops.h"

namespace ember::testing {

// Every element of t (any dtype) within tol of `expected` (row-major).
inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  std::vector<double> got = t.detach().to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= tol * (1 + std::abs(expected[i])));
  }
}

inline void check_close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  REQUIRE(a.shape() == b.shape());
  check_values(a, b.detach().to_vector<double>(), tol);
}

// A float64 random tensor for gradchecks, values in [low, high).
inline Tensor random64(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  Generator gen(seed);
  return uniform(shape, low, high, gen, Dtype::Float64);
}

inline void check_gradient(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                           GradcheckOptions options = {}) {
  GradcheckResult result = gradcheck(f, std::move(inputs), options);
  INFO(result.message);
  CHECK(result.ok);
}

// Runs fn, which must throw ember::Error whose message contains `fragment`.
template <typename Fn>
void check_error(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    FAIL("expected an ember::Error containing: " << fragment);
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace ember::testing
