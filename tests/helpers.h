// Test helpers: compare tensors with known numbers, run gradcheck, expect error messages, and run
// an op test on every device the build has (DEVICE_TEST_CASE).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "cuda_skip.h"

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

// check_gradient with f run on `device`: f gets copies of the inputs on `device` and its result
// comes back to the CPU (both copies are differentiable), so the analytic gradient is the device's
// backward while the finite differences perturb the CPU inputs. On the CPU it is check_gradient.
inline void check_gradient(Device device, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                           std::vector<Tensor> inputs, GradcheckOptions options = {}) {
  check_gradient(
      [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> moved;
        for (const Tensor& x : in) moved.push_back(x.to(device));
        return f(moved).to(Device::cpu());
      },
      std::move(inputs), options);
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

// ---- Every device: an op test written once runs on the CPU and on cuda:0.

// The devices a DEVICE_TEST_CASE runs on: the CPU, and cuda:0 when this process has a CUDA device.
// In ember_tests_emulated (the CUDA backend on the CPU emulator) only cuda:0: ember_tests, built from
// the same test files, covers the CPU.
inline std::vector<Device> test_devices() {
  std::vector<Device> devices;
  if (!cuda_emulated()) devices.push_back(Device::cpu());
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  return devices;
}

inline void run_on_devices(void (*body)(Device)) {
  for (Device device : test_devices()) {
    INFO("on " << device.str());
    body(device);
  }
}

}  // namespace ember::testing

// A test case whose body runs once per device of test_devices(), with `device` naming it (create
// the inputs there: tensor({...}).to(device)); a failure says on which device. Its file is also
// compiled into ember_tests_emulated (CMakeLists.txt finds the files that use this macro), where
// ctest lists it as "emulated: <name>", run on the emulated cuda:0. Test suite "devices".
#define DEVICE_TEST_CASE(name) EMBER_DEVICE_TEST_CASE_(name, DOCTEST_ANONYMOUS(ember_device_test_))
#define EMBER_DEVICE_TEST_CASE_(name, body)                                                  \
  static void body(ember::Device device);                                                    \
  TEST_CASE(name * doctest::test_suite("devices")) { ember::testing::run_on_devices(body); } \
  static void body([[maybe_unused]] ember::Device device)

// A test case that needs a CUDA device (mixing devices, say): skipped visibly without one, run on
// the emulator in ember_tests_emulated like a DEVICE_TEST_CASE. Test suite "cuda".
#define CUDA_TEST_CASE(name) EMBER_CUDA_TEST_CASE_(name, DOCTEST_ANONYMOUS(ember_cuda_test_))
#define EMBER_CUDA_TEST_CASE_(name, body)                                  \
  static void body();                                                      \
  TEST_CASE(name * doctest::test_suite("cuda")) {                          \
    if (!ember::testing::skip_without_cuda()) body();                      \
  }                                                                        \
  static void body()
