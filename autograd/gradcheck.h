// gradcheck: compares an op's analytic gradient with central finite differences in float64.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {

struct GradcheckOptions {
  double eps = 1e-6;    // finite-difference step
  double atol = 1e-5;   // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic and numeric values
  double max_error = 0; // largest |analytic - numeric| seen
};

// f maps float64 inputs (leaves that require grad) to one tensor. The analytic gradient of
// sum(f(inputs) * w), w a fixed random weight so that every output element counts, is checked
// against (L(x + eps) - L(x - eps)) / 2 eps for every element of every floating input.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          GradcheckOptions options = {});

}  // namespace ember
