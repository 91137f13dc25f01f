// gradcheck: analytic gradients (backward) against central finite differences, in float64.
#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace ember {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          GradcheckOptions options) {
  for (const Tensor& t : inputs)
    EMBER_CHECK(t.dtype() != Dtype::Float32, "gradcheck: use float64 inputs (float32 is too coarse for finite differences)");
  for (Tensor& t : inputs)
    if (t.dtype() == Dtype::Float64) {
      t.zero_grad();
      t.requires_grad_(true);
    }

  // A fixed random weight per output element: L = sum(f(x) * w).
  Tensor out = f(inputs);
  Generator gen(1234);
  Tensor weight = uniform(out.shape(), 0.5, 1.5, gen, Dtype::Float64);
  auto loss_value = [&]() {
    NoGradGuard no_grad;
    return sum(f(inputs) * weight).item<double>();
  };
  sum(out * weight).backward();

  GradcheckResult result;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor grad = x.grad().defined() ? x.grad() : zeros_like(x);
    std::vector<double> analytic = grad.to_vector<double>();
    // Perturb each element in place through a contiguous view of x's own memory.
    EMBER_CHECK(x.is_contiguous(), "gradcheck: input {} must be contiguous (make non-contiguous views inside f)", k);
    double* data = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double saved = data[i];
      data[i] = saved + options.eps;
      double plus = loss_value();
      data[i] = saved - options.eps;
      double minus = loss_value();
      data[i] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double error = std::abs(analytic[size_t(i)] - numeric);
      result.max_error = std::max(result.max_error, error);
      if (result.ok && !(error <= options.atol + options.rtol * std::abs(numeric))) {
        result.ok = false;
        result.message = fmt::format("input {} element {}: analytic {:.10g}, numeric {:.10g}", k, i,
                                     analytic[size_t(i)], numeric);
      }
    }
  }
  return result;
}

}  // namespace ember
