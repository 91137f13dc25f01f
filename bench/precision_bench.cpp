// The measured error of the bfloat16 path against float64 (docs/precision.md): for each op of the
// mixed-precision scope (matmul, linear forward and backward, attention forward and backward) at the
// recipe's shapes, on uniform(-1, 1) float32 inputs, the float32 and the bf16 results against the
// float64 result of the same inputs. Two measures per result y against y64:
//   norm     ||y - y64|| / ||y64||                               (Frobenius norms)
//   bound    max_ij |y - y64|_ij / (|A| |B|)_ij, over gamma(K)  (<= 1 is inside the derived bound;
//            products only, gamma(K) = 2 u + u^2 + 2 K eps32, u = 2^-8; a bfloat16 y, rounded once more
//            when stored, adds u |y64|_ij to the bound)
// The bf16 rows with "bfloat16 in" take their input rounded to bfloat16 first, as the model's layers
// after the first do in the scope (a bf16 linear's output is bfloat16).
// Usage: precision_bench [--threads N] [--seed S]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "core/random.h"

namespace {

using namespace ember;

const double u = std::ldexp(1.0, -8), eps32 = std::ldexp(1.0, -24);
double gamma_of(int64_t K) { return 2 * u + u * u + 2 * double(K) * eps32; }

std::vector<double> values(const Tensor& t) { return t.detach().to(Dtype::Float64).contiguous().to_vector<double>(); }

double norm_error(const Tensor& y, const Tensor& y64) {
  const std::vector<double> a = values(y), b = values(y64);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// max |y - y64| / (gamma(K) (|A| |B|)): the fraction of the derived bound used (A, B float64).
double bound_use(const Tensor& y, const Tensor& y64, const Tensor& A, const Tensor& B, int64_t K) {
  const std::vector<double> a = values(y), b = values(y64), m = values(matmul(abs(A), abs(B)));
  const double stored = y.dtype() == Dtype::BFloat16 ? u : 0.0;  // y's own rounding
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (gamma_of(K) * m[i] + stored * std::abs(b[i]) + 1e-300));
  return worst;
}

void row(const std::string& what, const Tensor& y32, const Tensor& y16, const Tensor& y64, double bound32 = -1,
         double bound16 = -1) {
  std::printf("| %-38s | %9.2e | %9.2e |", what.c_str(), norm_error(y32, y64), norm_error(y16, y64));
  if (bound16 >= 0) std::printf(" %9.2e | %9.2e |\n", bound32, bound16);
  else std::printf(" %9s | %9s |\n", "-", "-");
  std::fflush(stdout);
}

// Runs f(inputs) in float32, in the bf16 scope and in float64; f returns the result, and gradients of
// the inputs are read after backward with a fixed random output gradient.
struct Results {
  Tensor y32, y16, y64;
  std::vector<Tensor> g32, g16, g64;
};
template <typename F>
Results run_all(const std::vector<Tensor>& inputs32, F f, Generator& gen) {
  Results r;
  auto once = [&](Dtype dtype, bool bf16, Tensor& y, std::vector<Tensor>& grads, const Tensor& g) {
    std::vector<Tensor> in;
    for (const Tensor& x : inputs32) in.push_back(x.detach().to(dtype).requires_grad_());
    MixedPrecisionGuard precision(bf16 ? Precision::BFloat16 : Precision::Float32);
    y = f(in);
    y.backward(g.to(y.dtype()));  // (a bfloat16 y takes a bfloat16 gradient)
    for (const Tensor& x : in) grads.push_back(x.grad());
  };
  Tensor probe;
  {
    std::vector<Tensor> in;
    for (const Tensor& x : inputs32) in.push_back(x.detach());
    probe = f(in);
  }
  const Tensor g = uniform(probe.shape(), -1, 1, gen);
  once(Dtype::Float64, false, r.y64, r.g64, g);
  once(Dtype::Float32, false, r.y32, r.g32, g);
  once(Dtype::Float32, true, r.y16, r.g16, g);
  r.y64 = r.y64.detach();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  uint64_t seed = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  set_num_threads(threads);
  Generator gen(seed);
  std::printf("relative error against float64, inputs uniform(-1, 1), seed %llu (bench/precision_bench.cpp)\n\n",
              static_cast<unsigned long long>(seed));
  std::printf("| %-38s | %9s | %9s | %9s | %9s |\n", "op (shapes)", "fp32 norm", "bf16 norm", "fp32 bound", "bf16 bound");
  std::printf("|---|---:|---:|---:|---:|\n");

  // The recipe's linear layers: 32 x 256 = 8192 rows, dim 128, QKV 384, FFN 512.
  struct Linear {
    const char* name;
    int64_t rows, in, out;
  };
  for (const Linear& l : {Linear{"linear qkv [8192,128] -> 384", 8192, 128, 384},
                          Linear{"linear ffn1 [8192,128] -> 512", 8192, 128, 512},
                          Linear{"linear ffn2 [8192,512] -> 128", 8192, 512, 128}}) {
    Tensor x = uniform({l.rows, l.in}, -1, 1, gen), w = uniform({l.out, l.in}, -1, 1, gen);
    Results r = run_all({x, w}, [](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); }, gen);
    const Tensor x64 = x.to(Dtype::Float64), w64 = w.to(Dtype::Float64);
    row(std::string(l.name) + " y", r.y32, r.y16, r.y64, bound_use(r.y32, r.y64, x64, w64.transpose(0, 1), l.in),
        bound_use(r.y16, r.y64, x64, w64.transpose(0, 1), l.in));
    row(std::string(l.name) + " dx", r.g32[0], r.g16[0], r.g64[0]);
    row(std::string(l.name) + " dW", r.g32[1], r.g16[1], r.g64[1]);
  }
  {  // a layer after a layer: its x is a bf16 linear's bfloat16 output in the scope
    Tensor x = uniform({8192, 512}, -1, 1, gen), w = uniform({128, 512}, -1, 1, gen);
    Results r = run_all({x, w}, [](const std::vector<Tensor>& in) {
      const bool scoped = product_precision() == Precision::BFloat16;
      return linear(scoped ? in[0].to(Dtype::BFloat16) : in[0], in[1], Tensor());
    }, gen);
    row("linear ffn2, bfloat16 in: y", r.y32, r.y16, r.y64);
    row("linear ffn2, bfloat16 in: dx", r.g32[0], r.g16[0], r.g64[0]);
  }
  {
    Tensor a = uniform({4, 256, 32}, -1, 1, gen), b = uniform({4, 32, 256}, -1, 1, gen);
    Results r = run_all({a, b}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, gen);
    const Tensor a64 = a.to(Dtype::Float64), b64 = b.to(Dtype::Float64);
    row("matmul [4,256,32] @ [4,32,256]", r.y32, r.y16, r.y64, bound_use(r.y32, r.y64, a64, b64, 32),
        bound_use(r.y16, r.y64, a64, b64, 32));
    row("matmul dA", r.g32[0], r.g16[0], r.g64[0]);
    row("matmul dB", r.g32[1], r.g16[1], r.g64[1]);
  }
  {
    Tensor qkv = uniform({8, 256, 384}, -1, 1, gen);
    Results r = run_all({qkv}, [](const std::vector<Tensor>& in) { return attention(in[0], 4, Tensor()); }, gen);
    row("attention [8,256,384], h = 4: out", r.y32, r.y16, r.y64);
    row("attention d qkv", r.g32[0], r.g16[0], r.g64[0]);
  }
  {  // as in the model in the scope: qkv is the bf16 linear's bfloat16 output
    Tensor qkv = uniform({8, 256, 384}, -1, 1, gen);
    Results r = run_all({qkv}, [](const std::vector<Tensor>& in) {
      const bool scoped = product_precision() == Precision::BFloat16;
      return attention(scoped ? in[0].to(Dtype::BFloat16) : in[0], 4, Tensor());
    }, gen);
    row("attention, bfloat16 in: out", r.y32, r.y16, r.y64);
    row("attention, bfloat16 in: d qkv", r.g32[0], r.g16[0], r.g64[0]);
  }
  return 0;
}
