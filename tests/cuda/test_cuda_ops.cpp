// Parity of every op routed to the CUDA backend with the CPU: fresh random inputs of several shapes
// (contiguous, transposed, narrowed and broadcast), the values and the gradient of every input,
// float32 to a relative 1e-5. Then the caching allocator, the optimiser, and one whole training
// step of the IMDb recipe's model (small sizes) on both devices. Each case is skipped, with the
// reason printed, where there is no GPU; the last cases check what a machine without one does.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <unistd.h>

#include "core/allocator.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/precision.h"
#include "core/unary_math.h"
#include "core/update_rules.h"
#include "tests/attention_args.h"
#include "tests/cuda_skip.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on the CPU inputs and on GPU copies of them: the same output and, for every floating input,
// the same gradient (backward from the same random output gradient).
void check_parity(const std::string& name, const std::vector<Tensor>& inputs, const Fn& f, double tol = 1e-5,
                  uint64_t seed = 99) {
  INFO(name);
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& x : inputs) {
    bool grad = is_floating(x.dtype());
    Tensor c = x.detach().clone();
    Tensor g = x.detach().to(kGpu);
    if (grad) c.requires_grad_(), g.requires_grad_();
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor y_cpu = f(cpu_in);
  Tensor y_gpu = f(gpu_in);
  REQUIRE(y_gpu.device() == kGpu);
  REQUIRE(y_gpu.dtype() == y_cpu.dtype());
  check_close(y_gpu.to(Device::cpu()), y_cpu, tol);
  if (!y_cpu.requires_grad()) return;
  Generator gen(seed);
  Tensor grad = uniform(y_cpu.shape(), -1, 1, gen, y_cpu.dtype());
  y_cpu.backward(grad);
  y_gpu.backward(grad.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(cpu_in[i].grad().defined() == gpu_in[i].grad().defined());
    if (!cpu_in[i].grad().defined()) continue;
    CHECK(gpu_in[i].grad().device() == kGpu);
    check_close(gpu_in[i].grad().to(Device::cpu()), cpu_in[i].grad(), tol);
  }
}

Tensor rnd(const Shape& shape, uint64_t seed, double low = -2, double high = 2, Dtype dtype = Dtype::Float32) {
  Generator gen(seed);
  return uniform(shape, low, high, gen, dtype);
}

Tensor random_mask(const Shape& shape, uint64_t seed) { return gt(rnd(shape, seed, 0, 1), full({}, 0.7)); }

}  // namespace

TEST_CASE("cuda ops: copies of strided and broadcast tensors, with dtype conversions") {
  if (skip_without_cuda()) return;
  Tensor x = rnd({4, 5, 6}, 1);
  Tensor g = x.to(kGpu);
  check_close(g.transpose(0, 2).contiguous().to(Device::cpu()), x.transpose(0, 2).contiguous(), 0);
  check_close(g.permute({1, 2, 0}).contiguous().to(Device::cpu()), x.permute({1, 2, 0}).contiguous(), 0);
  check_close(g.narrow(1, 1, 3).slice(2, 2, 5).contiguous().to(Device::cpu()),
              x.narrow(1, 1, 3).slice(2, 2, 5).contiguous(), 0);
  check_close(g.select(0, 2).unsqueeze(0).expand({3, 5, 6}).contiguous().to(Device::cpu()),
              x.select(0, 2).unsqueeze(0).expand({3, 5, 6}).contiguous(), 0);
  // Tensor::to(Device) of a non-contiguous view, and dtype conversions on the GPU.
  check_close(x.transpose(0, 1).to(kGpu).to(Device::cpu()), x.transpose(0, 1), 0);
  check_close(g.to(Dtype::Float64).to(Device::cpu()), x.to(Dtype::Float64), 0);
  Tensor ints = arange(-5, 7);
  check_close(ints.to(kGpu).to(Dtype::Float32).to(Device::cpu()), ints.to(Dtype::Float32), 0);
  check_close(ints.to(kGpu).to(Dtype::Bool).to(Device::cpu()), ints.to(Dtype::Bool), 0);
  // copy_ broadcasts, and crosses devices.
  Tensor dst = zeros({3, 4}, Dtype::Float32, kGpu);
  dst.copy_(tensor({1, 2, 3, 4}));
  check_values(dst.to(Device::cpu()), {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, 0);
  // cat and stack
  check_parity("cat", {rnd({2, 3}, 2), rnd({2, 5}, 3)}, [](const std::vector<Tensor>& v) { return cat({v[0], v[1]}, 1); });
  check_parity("stack", {rnd({2, 3}, 2), rnd({2, 3}, 3)}, [](const std::vector<Tensor>& v) { return stack({v[0], v[1]}, 0); });
}

TEST_CASE("cuda ops: fill_, add_ and mul_ on strided views") {
  if (skip_without_cuda()) return;
  Tensor x = rnd({6, 7}, 4);
  Tensor g = x.to(kGpu);
  Tensor other = rnd({7}, 5);
  x.transpose(0, 1).narrow(0, 2, 3).fill_(1.5);
  g.transpose(0, 1).narrow(0, 2, 3).fill_(1.5);
  x.add_(other, -0.5);
  g.add_(other.to(kGpu), -0.5);
  x.narrow(0, 1, 4).mul_(3.0);
  g.narrow(0, 1, 4).mul_(3.0);
  check_close(g.to(Device::cpu()), x, 1e-6);
  Tensor ints = zeros({5}, Dtype::Int64, kGpu);
  ints.fill_(7);
  check_values(ints.to(Device::cpu()), {7, 7, 7, 7, 7}, 0);
}

// One row per entry of EMBER_BINARY_OPS (core/unary_math.h), generated: a new binary op is
// tested here from its first commit. Inputs are multiples of 1/2 (so that eq finds equal pairs),
// b away from 0 (div).
TEST_CASE("cuda ops: every binary op with broadcasting and strided operands, values and gradients") {
  if (skip_without_cuda()) return;
  struct Op {
    const char* name;
    Tensor (*f)(const Tensor&, const Tensor&);
  };
#define EMBER_BINARY_CASE(name, Functor) {#name, [](const Tensor& a, const Tensor& b) { return ember::name(a, b); }},
  const Op ops[] = {EMBER_BINARY_OPS(EMBER_BINARY_CASE)};
#undef EMBER_BINARY_CASE
  // Multiples of 1/2 drawn from [low, high), rounded on the host; b keeps away from 0 with a random sign.
  auto halves = [](const Shape& shape, uint64_t seed, double low, double high, bool nonzero, Dtype dtype) {
    std::vector<double> v = rnd(shape, seed, low, high, Dtype::Float64).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = std::round(v[i] * 2) / 2;
      if (nonzero && v[i] == 0) v[i] = i % 2 ? 0.5 : -0.5;
    }
    return from_vector(v, shape).to(dtype);
  };
  auto a_of = [&](const Shape& shape, uint64_t seed, Dtype dtype = Dtype::Float32) {
    return halves(shape, seed, -3, 3, false, dtype);
  };
  auto b_of = [&](const Shape& shape, uint64_t seed, Dtype dtype = Dtype::Float32) {
    return halves(shape, seed, -3, 3, true, dtype);
  };
  for (const Op& op : ops) {
    auto f = op.f;
    Fn fn = [f](const std::vector<Tensor>& v) { return f(v[0], v[1]); };
    check_parity(std::string(op.name) + " same shape", {a_of({3, 40}, 1), b_of({3, 40}, 2)}, fn);
    check_parity(std::string(op.name) + " broadcast", {a_of({4, 1, 6}, 3), b_of({5, 1}, 4)}, fn);
    check_parity(std::string(op.name) + " transposed", {a_of({7, 5}, 5), b_of({5, 7}, 6)},
                 [f](const std::vector<Tensor>& v) { return f(v[0].transpose(0, 1), v[1]); });
    check_parity(std::string(op.name) + " float64 scalar", {a_of({3, 4}, 7, Dtype::Float64), b_of({}, 8, Dtype::Float64)},
                 fn, 1e-12);
    check_parity(std::string(op.name) + " int64", {(a_of({3, 4}, 9) * 2.0).to(Dtype::Int64),
                 (b_of({4}, 10) * 2.0).to(Dtype::Int64)}, fn, 0);
  }
  // The comparisons found both outcomes (the inputs are not all different or all equal).
  Tensor a = a_of({3, 40}, 1), b = a_of({3, 40}, 2);
  CHECK(sum(eq(a, b).to(Dtype::Float32)).item<float>() > 0);
  CHECK(sum(eq(a, b).to(Dtype::Float32)).item<float>() < 120);
  check_error([&] { (a.to(kGpu) + b).to(Device::cpu()); }, "different devices");
}

// Each op checks its inputs once, for every device, and the kernels assume checked input: so a bad
// input gets the very same message on the CPU and on the GPU.
TEST_CASE("cuda ops: a bad input gets the same error on both devices (the op checks it, not the kernel)") {
  if (skip_without_cuda()) return;
  const Dtype f32 = Dtype::Float32, f64 = Dtype::Float64, i64 = Dtype::Int64;
  const std::pair<const char*, std::function<void(Device)>> cases[] = {
      {"exp of int64", [](Device d) { exp(arange(3).to(d)); }},
      {"add of float32 and float64", [&](Device d) { add(zeros({2}, f32, d), zeros({2}, f64, d)); }},
      {"add of bools", [](Device d) { add(zeros({2}, Dtype::Bool, d), zeros({2}, Dtype::Bool, d)); }},
      {"mul of shapes that do not broadcast", [&](Device d) { mul(zeros({2, 3}, f32, d), zeros({4}, f32, d)); }},
      {"max over an empty dim", [&](Device d) { max(zeros({2, 0}, f32, d), {1}); }},
      {"argmax over an empty dim", [&](Device d) { argmax(zeros({2, 0}, f32, d), 1); }},
      {"argmax of int64", [&](Device d) { argmax(zeros({2, 3}, i64, d), 1); }},
      {"softmax of int64", [](Device d) { softmax(arange(3).to(d), 0); }},
      {"layer_norm with a float64 weight", [&](Device d) { layer_norm(zeros({2, 3}, f32, d), ones({3}, f64, d), Tensor()); }},
      {"copy_ from a larger tensor", [&](Device d) { zeros({3}, f32, d).copy_(zeros({2, 3}, f32, d)); }},
      {"add_ of another dtype", [&](Device d) { zeros({3}, f32, d).add_(zeros({3}, f64, d)); }},
      {"mul_ of int64", [&](Device d) { zeros({3}, i64, d).mul_(2.0); }},
      {"embedding of an int64 weight", [&](Device d) { embedding(zeros({4, 2}, i64, d), zeros({3}, i64, d)); }},
      {"attention on int64", [&](Device d) { attention(zeros({1, 2, 6}, i64, d), 1, Tensor()); }},
      {"cross_entropy with a target out of range",
       [&](Device d) { cross_entropy(zeros({2, 3}, f32, d), full({2}, 3.0, i64, d)); }},
      {"an AdamW step with a gradient of another shape",
       [&](Device d) {
         adam_step_({zeros({3}, f32, d)}, {zeros({4}, f32, d)}, {zeros({3}, f32, d)}, {zeros({3}, f32, d)}, {0.0},
                    AdamHyper{0.1, 0.9, 0.999, 1e-8, 0.1, 0.001, true});
       }},
  };
  auto message = [](const std::function<void(Device)>& f, Device d) -> std::string {
    try {
      f(d);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  for (const auto& [name, f] : cases) {
    INFO(name);
    const std::string on_cpu = message(f, Device::cpu()), on_gpu = message(f, kGpu);
    CHECK(on_cpu != "(no error)");
    CHECK(on_gpu == on_cpu);
  }
}

TEST_CASE("cuda ops: element-wise math on non-contiguous inputs") {
  if (skip_without_cuda()) return;
  check_parity("gelu of a transpose", {rnd({6, 9}, 11)}, [](const std::vector<Tensor>& v) { return gelu(v[0].transpose(0, 1)); });
  check_parity("exp of a narrowed view", {rnd({6, 9}, 12)}, [](const std::vector<Tensor>& v) { return exp(v[0].narrow(1, 2, 5)); });
  check_parity("tanh then scalar ops", {rnd({4, 4}, 13)}, [](const std::vector<Tensor>& v) { return 2.0 - tanh(v[0]) * 3.0; });
}

TEST_CASE("cuda ops: sum, mean, max, var and argmax over dims") {
  if (skip_without_cuda()) return;
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}};
  for (const auto& dims : dim_sets) {
    for (bool keep : {false, true}) {
      std::string tag = " dims " + std::to_string(dims.size()) + (dims.empty() ? "" : " first " + std::to_string(dims[0]));
      check_parity("sum" + tag, {rnd({4, 5, 300}, 21)}, [dims, keep](const std::vector<Tensor>& v) { return sum(v[0], dims, keep); });
      check_parity("mean" + tag, {rnd({4, 5, 6}, 22)}, [dims, keep](const std::vector<Tensor>& v) { return mean(v[0], dims, keep); });
      check_parity("max" + tag, {rnd({4, 5, 6}, 23)}, [dims, keep](const std::vector<Tensor>& v) { return max(v[0], dims, keep); });
      check_parity("var" + tag, {rnd({4, 5, 6}, 24)}, [dims, keep](const std::vector<Tensor>& v) { return var(v[0], dims, keep); });
    }
  }
  check_parity("sum of a transpose", {rnd({30, 70}, 25)}, [](const std::vector<Tensor>& v) { return sum(v[0].transpose(0, 1), {1}); });
  check_parity("sum to a broadcast shape", {rnd({4, 5, 6}, 26)}, [](const std::vector<Tensor>& v) { return sum_to(v[0], {5, 1}); });
  Tensor x = rnd({7, 300}, 27);
  for (int64_t d : {0, 1}) check_close(argmax(x.to(kGpu), d).to(Device::cpu()), argmax(x, d), 0);
  // Every dim of a 4-D tensor: dims before the last are moved to rows on the GPU, in [outer, inner] order.
  Tensor x4 = rnd({3, 4, 5, 6}, 28);
  for (int64_t d : {0, 1, 2, 3}) check_close(argmax(x4.to(kGpu), d).to(Device::cpu()), argmax(x4, d), 0);
  check_parity("sum over a middle block of a transpose", {rnd({3, 4, 5, 6}, 29)},
               [](const std::vector<Tensor>& v) { return sum(v[0].transpose(0, 3), {1, 2}); });
  // Integer sums: the CPU reduces only floating tensors, so the rows of 0..23 are checked by hand.
  Tensor ints = arange(24).view({4, 6});
  Tensor int_sums = sum(ints.to(kGpu), {1});
  CHECK(int_sums.dtype() == Dtype::Int64);
  check_values(int_sums.to(Device::cpu()), {15, 51, 87, 123}, 0);
}

TEST_CASE("cuda ops: softmax and log_softmax over every dim, values and gradients") {
  if (skip_without_cuda()) return;
  for (int64_t d : {0, 1, 2, -1}) {
    check_parity("softmax dim " + std::to_string(d), {rnd({3, 4, 500}, 31, -5, 5)},
                 [d](const std::vector<Tensor>& v) { return softmax(v[0], d); });
    check_parity("log_softmax dim " + std::to_string(d), {rnd({3, 4, 50}, 32, -5, 5)},
                 [d](const std::vector<Tensor>& v) { return log_softmax(v[0], d); });
  }
  check_parity("softmax of a transpose", {rnd({9, 13}, 33)}, [](const std::vector<Tensor>& v) { return softmax(v[0].transpose(0, 1), -1); });
  check_parity("softmax over a middle dim of a 4-D transpose", {rnd({3, 4, 5, 6}, 37)},
               [](const std::vector<Tensor>& v) { return log_softmax(v[0].transpose(0, 2), 1); });
  check_parity("softmax float64", {rnd({5, 17}, 34, -3, 3, Dtype::Float64)},
               [](const std::vector<Tensor>& v) { return softmax(v[0], -1); }, 1e-12);
}

TEST_CASE("cuda ops: softmax through cuDNN (EMBER_SOFTMAX=cudnn) matches the CPU too") {
  if (skip_without_cuda()) return;
  if (!cuda::cudnn_available()) return skip_test("this build has no cuDNN");
  cuda::set_softmax_cudnn(true);
  try {
    for (int64_t d : {0, -1}) {
      check_parity("cuDNN softmax dim " + std::to_string(d), {rnd({3, 4, 300}, 35, -5, 5)},
                   [d](const std::vector<Tensor>& v) { return softmax(v[0], d); });
      check_parity("cuDNN log_softmax dim " + std::to_string(d), {rnd({3, 4, 30}, 36, -5, 5)},
                   [d](const std::vector<Tensor>& v) { return log_softmax(v[0], d); });
    }
  } catch (...) {
    cuda::set_softmax_cudnn(false);
    throw;
  }
  cuda::set_softmax_cudnn(false);
}

TEST_CASE("cuda ops: layer_norm with and without affine parameters, values and gradients") {
  if (skip_without_cuda()) return;
  check_parity("layer_norm affine", {rnd({4, 33, 128}, 41), rnd({128}, 42, 0.5, 1.5), rnd({128}, 43)},
               [](const std::vector<Tensor>& v) { return layer_norm(v[0], v[1], v[2]); });
  check_parity("layer_norm no affine, 300 rows", {rnd({300, 20}, 44)},
               [](const std::vector<Tensor>& v) { return layer_norm(v[0], Tensor(), Tensor()); });
  check_parity("layer_norm of a transpose", {rnd({16, 8}, 45), rnd({16}, 46), rnd({16}, 47)},
               [](const std::vector<Tensor>& v) { return layer_norm(v[0].transpose(0, 1), v[1], v[2]); });
}

TEST_CASE("cuda ops: embedding, repeated ids summed deterministically in the CPU's order") {
  if (skip_without_cuda()) return;
  Tensor ids = from_vector(std::vector<int64_t>{3, 1, 3, 3, 0, 7, 1, 3, 9, 0, 3, 3}, {3, 4});
  Tensor weight = rnd({10, 24}, 51);
  check_parity("embedding", {weight, ids}, [](const std::vector<Tensor>& v) { return embedding(v[0], v[1]); }, 1e-6);
  check_parity("embedding int32 ids", {weight, ids.to(Dtype::Int32)},
               [](const std::vector<Tensor>& v) { return embedding(v[0], v[1]); }, 1e-6);
  // Bitwise the same on two runs.
  Tensor w = weight.to(kGpu).requires_grad_();
  Tensor g = rnd({3, 4, 24}, 52).to(kGpu);
  embedding(w, ids.to(kGpu)).backward(g);
  std::vector<float> first = w.grad().to_vector<float>();
  w.zero_grad();
  embedding(w, ids.to(kGpu)).backward(g);
  CHECK(w.grad().to_vector<float>() == first);
  check_error([&] { embedding(weight.to(kGpu), from_vector(std::vector<int64_t>{10}).to(kGpu)); }, "out of range");
}

TEST_CASE("cuda ops: masked_fill and where with broadcast masks, values and gradients") {
  if (skip_without_cuda()) return;
  Tensor mask = random_mask({4, 1, 6}, 61);
  check_parity("masked_fill", {rnd({4, 5, 6}, 62), mask},
               [](const std::vector<Tensor>& v) { return masked_fill(v[0], v[1], -1e9); });
  check_parity("where", {random_mask({5, 1}, 63), rnd({5, 6}, 64), rnd({6}, 65)},
               [](const std::vector<Tensor>& v) { return where(v[0], v[1], v[2]); });
}

TEST_CASE("cuda ops: dropout draws the CPU's mask exactly for the same seed") {
  if (skip_without_cuda()) return;
  Tensor x = rnd({37, 129}, 71);
  for (double p : {0.1, 0.5, 1.0}) {
    Generator g1(5), g2(5);
    Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
    Tensor yc = dropout(xc, p, true, g1), yg = dropout(xg, p, true, g2);
    CHECK(g1.offset() == g2.offset());
    check_close(yg.to(Device::cpu()), yc, 0);
    Tensor grad = rnd({37, 129}, 72);
    yc.backward(grad);
    yg.backward(grad.to(kGpu));
    check_close(xg.grad().to(Device::cpu()), xc.grad(), 0);
  }
}

namespace {

// The bits of a CPU bfloat16 tensor (contiguous copy).
std::vector<uint16_t> bf16_bits(const Tensor& t) {
  Tensor c = t.detach().to(Device::cpu()).contiguous();
  REQUIRE(c.dtype() == Dtype::BFloat16);
  std::vector<uint16_t> bits(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) bits[size_t(i)] = c.data<BFloat16>()[i].bits;
  return bits;
}

// The GPU's bfloat16 result against the CPU's: every element within one bfloat16 step (neighbouring bit
// patterns of one sign), and at least `exact` of them the same value: the same bits, or both NaN. A NaN's
// sign and payload are the machine's (cuda/gpu_nan.h: x86 makes sqrt(-1) 0xFFC0 in bfloat16, a GPU 0x7FFF),
// not a result: counting them as differences failed sqrt, rsqrt and log on the first H200 run (half of all
// inputs are negative), and fails them on the emulator too, which writes NaNs as a GPU does.
void check_bf16(const Tensor& gpu, const Tensor& cpu, double exact = 1.0) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const std::vector<uint16_t> a = bf16_bits(gpu), b = bf16_bits(cpu);
  int64_t differ = 0, far = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const bool both_nan = std::isnan(float(BFloat16::from_bits(a[i]))) && std::isnan(float(BFloat16::from_bits(b[i])));
    if (both_nan) continue;
    ++differ;
    const bool neighbours = ((a[i] ^ b[i]) & 0x8000) == 0 && std::abs(int(a[i]) - int(b[i])) == 1;
    if (!neighbours && far++ < 3) {
      INFO("element " << i << ": GPU " << float(BFloat16::from_bits(a[i])) << ", CPU " << float(BFloat16::from_bits(b[i])));
      CHECK(false);
    }
  }
  CHECK(far == 0);
  CHECK(double(a.size() - size_t(differ)) >= exact * double(a.size()));
}

// Every bfloat16 value, as a [256, 256] tensor.
Tensor every_bf16() {
  Tensor x = Tensor::empty({256, 256}, Dtype::BFloat16);
  for (int64_t i = 0; i < 65536; ++i) x.data<BFloat16>()[i] = BFloat16::from_bits(uint16_t(i));
  return x;
}

}  // namespace

TEST_CASE("cuda ops: bfloat16 tensors: conversions, copies, fill_, add_ and mul_ give the CPU's bits") {
  if (skip_without_cuda()) return;
  // float32 and float64 to bfloat16 on the GPU, rounded as the CPU rounds: ties to even, subnormals,
  // overflow to infinity, NaN kept a NaN; and back, exactly.
  Tensor x = rnd({37, 41}, 81, -3, 3);
  const std::vector<float> specials = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 0x1p-130f, -0x1p-133f,
                                       3.3895e38f, 3.4e38f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f};
  for (size_t i = 0; i < specials.size(); ++i) x.data<float>()[i * 7] = specials[i];
  Tensor g = x.to(kGpu);
  check_bf16(g.to(Dtype::BFloat16), x.to(Dtype::BFloat16));
  Tensor x64 = x.to(Dtype::Float64);
  x64.data<double>()[1] = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);  // rounds up once, not to even twice
  check_bf16(x64.to(kGpu).to(Dtype::BFloat16), x64.to(Dtype::BFloat16));
  Tensor every = every_bf16();
  const Tensor every_gpu = every.to(kGpu);
  for (Dtype wide : {Dtype::Float32, Dtype::Float64}) {  // byte for byte: NaNs and infinities included
    const Tensor on_gpu = every_gpu.to(wide).to(Device::cpu()), on_cpu = every.to(wide);
    CHECK(std::memcmp(on_gpu.raw_data(), on_cpu.raw_data(), size_t(on_cpu.numel() * dtype_size(wide))) == 0);
  }
  check_bf16(arange(-300, 300).to(kGpu).to(Dtype::BFloat16), arange(-300, 300).to(Dtype::BFloat16));
  // Strided and broadcast copies of a bfloat16 tensor, and copy_ across dtypes.
  Tensor b16 = x.to(Dtype::BFloat16), b16_gpu = b16.to(kGpu);
  check_bf16(b16_gpu.transpose(0, 1).narrow(0, 3, 20).contiguous(), b16.transpose(0, 1).narrow(0, 3, 20).contiguous());
  check_bf16(b16_gpu.select(0, 5).unsqueeze(0).expand({4, 41}).contiguous(),
             b16.select(0, 5).unsqueeze(0).expand({4, 41}).contiguous());
  Tensor into_cpu = zeros({37, 41}, Dtype::BFloat16), into_gpu = zeros({37, 41}, Dtype::BFloat16, kGpu);
  into_cpu.copy_(x);
  into_gpu.copy_(g);
  check_bf16(into_gpu, into_cpu);
  // fill_, add_ and mul_ in place on strided views: computed in float, rounded once.
  Tensor other = rnd({37}, 82).to(Dtype::BFloat16);
  b16.transpose(0, 1).narrow(0, 2, 5).fill_(1.2345);
  b16_gpu.transpose(0, 1).narrow(0, 2, 5).fill_(1.2345);
  b16.transpose(0, 1).add_(other, -0.5);
  b16_gpu.transpose(0, 1).add_(other.to(kGpu), -0.5);
  b16.narrow(0, 1, 30).mul_(3.0);
  b16_gpu.narrow(0, 1, 30).mul_(3.0);
  check_bf16(b16_gpu, b16, 0.99);  // add_'s a + alpha b may be one fused multiply-add on a GPU
}

TEST_CASE("cuda ops: bfloat16 element-wise math, where and dropout give the CPU's results, values and gradients") {
  if (skip_without_cuda()) return;
  const Tensor every = every_bf16();
  // Every unary op on all 65,536 bfloat16 inputs, and its gradient: float math rounded once. The GPU's float
  // functions may differ from the CPU's in the last float bit, which moves a rounding only near a tie.
  const auto unary = [&](const std::string& name, const std::function<Tensor(const Tensor&)>& op) {
    INFO("op " << name);  // a std::string: a const char* here was printed as its address
    Tensor xc = every.clone().requires_grad_(), xg = every.to(kGpu).requires_grad_();
    Tensor yc = op(xc), yg = op(xg);
    REQUIRE(yg.dtype() == Dtype::BFloat16);
    check_bf16(yg, yc, 0.99);
    Generator gen(17);
    Tensor grad = uniform({256, 256}, -4, 4, gen).to(Dtype::BFloat16);
    yc.backward(grad);
    yg.backward(grad.to(kGpu));
    REQUIRE(xg.grad().dtype() == Dtype::BFloat16);
    check_bf16(xg.grad(), xc.grad(), 0.99);
  };
#define EMBER_CHECK_BF16_UNARY(name, Functor, ...) unary(#name, [](const Tensor& x) { return name(x); });
  EMBER_UNARY_OPS(EMBER_CHECK_BF16_UNARY)
#undef EMBER_CHECK_BF16_UNARY
  unary("pow 3", [](const Tensor& x) { return pow(x, 3.0); });
  unary("add_scalar", [](const Tensor& x) { return add_scalar(x, 0.3); });
  unary("mul_scalar", [](const Tensor& x) { return mul_scalar(x, -1.7); });

  // Binary ops with broadcasting and a strided operand: one float operation each, rounded once: the same bits.
  const Tensor a = rnd({6, 1, 9}, 83).to(Dtype::BFloat16), b = rnd({5, 9}, 84, 0.5, 2).to(Dtype::BFloat16);
  const Tensor at = a.to(kGpu), bt = b.to(kGpu);
  check_bf16(add(at, bt), add(a, b));
  check_bf16(sub(at, bt.transpose(0, 1).contiguous().transpose(0, 1)), sub(a, b));
  check_bf16(mul(at, bt), mul(a, b));
  check_bf16(div(at, bt), div(a, b));
  check_close(gt(at, bt).to(Device::cpu()), gt(a, b), 0);
  // A bfloat16 operand with a float32 one: float32, the bfloat16 side widened exactly.
  const Tensor wide = rnd({5, 9}, 85);
  check_close(add(wide.to(kGpu), at).to(Device::cpu()), add(wide, a), 0);

  // where and masked_fill select bfloat16 values as they are.
  const Tensor mask = random_mask({6, 1, 9}, 86);
  check_bf16(where(mask.to(kGpu), at, bt), where(mask, a, b));
  check_bf16(masked_fill(at, mask.to(kGpu), -2.5), masked_fill(a, mask, -2.5));

  // Dropout: the CPU's mask for the same seed, each kept value scaled in float and rounded once; and backward.
  const Tensor x = rnd({37, 129}, 87).to(Dtype::BFloat16);
  for (double p : {0.1, 0.5, 1.0}) {
    INFO("dropout p = " << p);
    Generator g1(5), g2(5);
    Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
    Tensor yc = dropout(xc, p, true, g1), yg = dropout(xg, p, true, g2);
    CHECK(g1.offset() == g2.offset());
    check_bf16(yg, yc);
    Tensor grad = rnd({37, 129}, 88).to(Dtype::BFloat16);
    yc.backward(grad);
    yg.backward(grad.to(kGpu));
    check_bf16(xg.grad(), xc.grad());
  }
  // Reductions widen a bfloat16 input to float32 first, on either device.
  check_close(sum(at, {0}).to(Device::cpu()), sum(a, {0}), 1e-6);
}

TEST_CASE("cuda ops: cross_entropy with ignored rows, values and gradients") {
  if (skip_without_cuda()) return;
  Tensor targets = from_vector(std::vector<int64_t>{2, 0, -100, 4, 1, 1, -100, 3});
  check_parity("cross_entropy", {rnd({8, 5}, 81, -4, 4), targets},
               [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); });
  check_parity("cross_entropy wide", {rnd({6, 3000}, 82, -4, 4), from_vector(std::vector<int64_t>{5, 2999, 0, 17, 100, 2})},
               [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); });
  check_parity("cross_entropy all ignored", {rnd({2, 3}, 83), from_vector(std::vector<int64_t>{-100, -100})},
               [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); });
  // Rows of up to 1024 classes run a warp each, longer ones a block: the classifier's 2 classes
  // (more rows than one block's 8 warps), an odd width (some lanes take one more), the limit, one past it;
  // float64 too.
  struct Width {
    int64_t rows, classes;
  };
  uint64_t seed = 84;
  for (Width w : {Width{37, 2}, Width{9, 33}, Width{5, 1024}, Width{3, 1025}}) {
    std::vector<int64_t> t(static_cast<size_t>(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) t[size_t(r)] = r % 4 == 3 ? -100 : (r * 7 + 1) % w.classes;
    for (Dtype dtype : {Dtype::Float32, Dtype::Float64})
      check_parity("cross_entropy " + std::to_string(w.rows) + " x " + std::to_string(w.classes) + " " +
                       std::string(dtype_name(dtype)),
                   {rnd({w.rows, w.classes}, ++seed, -4, 4).to(dtype), from_vector(t)},
                   [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); },
                   dtype == Dtype::Float32 ? 1e-5 : 1e-12);
  }
}

TEST_CASE("cuda ops: matmul through cuBLAS: 2-D, transposed, batched with broadcast, 1-D operands") {
  if (skip_without_cuda()) return;
  auto mm = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  check_parity("2-D", {rnd({33, 70}, 91), rnd({70, 45}, 92)}, mm);
  check_parity("A transposed", {rnd({70, 33}, 93), rnd({70, 45}, 94)},
               [](const std::vector<Tensor>& v) { return matmul(v[0].transpose(0, 1), v[1]); });
  check_parity("B transposed", {rnd({33, 70}, 95), rnd({45, 70}, 96)},
               [](const std::vector<Tensor>& v) { return matmul(v[0], v[1].transpose(0, 1)); });
  check_parity("batched", {rnd({4, 3, 9, 16}, 97), rnd({4, 3, 16, 5}, 98)}, mm);
  check_parity("batch broadcast", {rnd({4, 1, 9, 16}, 99), rnd({3, 16, 5}, 100)}, mm);
  check_parity("shared matrix", {rnd({6, 9, 16}, 101), rnd({16, 5}, 102)}, mm);
  check_parity("vector @ matrix", {rnd({16}, 103), rnd({16, 5}, 104)}, mm);
  check_parity("matrix @ vector", {rnd({7, 16}, 105), rnd({16}, 106)}, mm);
  check_parity("dot", {rnd({16}, 107), rnd({16}, 108)}, mm);
  check_parity("every other column", {rnd({8, 20}, 109), rnd({10, 3}, 110)},
               [](const std::vector<Tensor>& v) { return matmul(v[0].view({8, 10, 2}).select(2, 0), v[1]); });
  check_parity("float64", {rnd({12, 30}, 111, -1, 1, Dtype::Float64), rnd({30, 7}, 112, -1, 1, Dtype::Float64)}, mm, 1e-12);
}

TEST_CASE("cuda ops: linear with and without bias, values and gradients") {
  if (skip_without_cuda()) return;
  check_parity("linear", {rnd({4, 9, 64}, 121), rnd({48, 64}, 122), rnd({48}, 123)},
               [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); });
  check_parity("linear no bias", {rnd({10, 64}, 124), rnd({3, 64}, 125)},
               [](const std::vector<Tensor>& v) { return linear(v[0], v[1], Tensor()); });
}

TEST_CASE("cuda ops: attention with a key-padding mask (composed on the GPU) matches the CPU's fused kernel") {
  if (skip_without_cuda()) return;
  const int64_t B = 3, T = 11, D = 32;
  std::vector<bool> pad(size_t(B * T), false);
  for (int64_t t = 7; t < T; ++t) pad[size_t(0 * T + t)] = true;
  for (int64_t t = 9; t < T; ++t) pad[size_t(2 * T + t)] = true;
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  for (size_t i = 0; i < pad.size(); ++i) mask.data<bool>()[i] = pad[i];
  for (int64_t heads : {1, 4}) {
    check_parity("attention heads " + std::to_string(heads), {rnd({B, T, 3 * D}, 131), mask},
                 [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, v[1]); });
    check_parity("causal attention heads " + std::to_string(heads), {rnd({B, T, 3 * D}, 132)},
                 [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, Tensor(), true); });
  }
}

TEST_CASE("cuda ops: the fused attention kernels (EMBER_ATTENTION=fused) match the CPU, values, weights and gradients") {
  if (skip_without_cuda()) return;
  // The tiled kernels of cuda/attention_kernels.cu: float32 to a relative 1e-5, float64 to 1e-12.
  // T = 37: tails in every tile size; D = 48: head sizes 48 and 16 (padded to 64 and 16 in shared
  // memory). Then the recipe's widths (D = 128, heads 1, 4, 8: head sizes 128, 32, 16) at T = 200
  // with reviews of 200, 130 and 45 tokens, so that whole key tiles are padding and skipped.
  testing::AttentionKernels fused(true);  // put back when the case ends
  {
    {
      const int64_t B = 2, T = 37, D = 48;
      Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) mask.data<bool>()[b * T + t] = t >= T - 5 * (b + 1);
      for (int64_t heads : {1, 3}) {
        check_parity("fused attention heads " + std::to_string(heads), {rnd({B, T, 3 * D}, 133), mask},
                     [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, v[1]); });
        check_parity("fused causal attention heads " + std::to_string(heads), {rnd({B, T, 3 * D}, 134)},
                     [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, Tensor(), true); });
        check_parity("fused attention float64", {rnd({B, T, 3 * D}, 135, -1, 1, Dtype::Float64), mask},
                     [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, v[1]); }, 1e-12);
      }
      Tensor qkv = rnd({B, T, 3 * D}, 136);
      Tensor w_cpu, w_gpu;
      attention(qkv, 4, mask, false, &w_cpu);
      attention(qkv.to(kGpu), 4, mask.to(kGpu), false, &w_gpu);
      check_close(w_gpu.to(Device::cpu()), w_cpu, 1e-5);
    }
    {
      const int64_t B = 3, T = 200, D = 128;
      const int64_t lengths[B] = {200, 130, 45};
      Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) mask.data<bool>()[b * T + t] = t >= lengths[b];
      for (int64_t heads : {1, 4, 8}) {
        check_parity("fused attention, recipe width, heads " + std::to_string(heads), {rnd({B, T, 3 * D}, 137), mask},
                     [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, v[1]); });
        check_parity("fused causal attention with padding, heads " + std::to_string(heads),
                     {rnd({B, T, 3 * D}, 138), mask},
                     [heads](const std::vector<Tensor>& v) { return attention(v[0], heads, v[1], true); });
      }
      check_parity("fused attention float64, head size 128", {rnd({B, T, 3 * D}, 139, -1, 1, Dtype::Float64), mask},
                   [](const std::vector<Tensor>& v) { return attention(v[0], 1, v[1], true); }, 1e-12);
      // Deterministic: no atomics, every sum in a fixed order, so two runs give the same bits.
      Tensor qkv = rnd({B, T, 3 * D}, 140).to(kGpu).requires_grad_();
      Tensor g = rnd({B, T, D}, 141).to(kGpu);
      Tensor gpu_mask = mask.to(kGpu);
      std::vector<std::vector<float>> outs, grads;
      for (int run = 0; run < 2; ++run) {
        qkv.zero_grad();
        Tensor out = attention(qkv, 4, gpu_mask);
        sum(out * g).backward();
        outs.push_back(out.detach().to(Device::cpu()).to_vector<float>());
        grads.push_back(qkv.grad().to(Device::cpu()).to_vector<float>());
      }
      CHECK(outs[0] == outs[1]);
      CHECK(grads[0] == grads[1]);
    }
    // A head size over the kernels' 128 runs the composed version instead.
    check_parity("head size 144 (composed)", {rnd({2, 9, 3 * 144}, 142)},
                 [](const std::vector<Tensor>& v) { return attention(v[0], 1, Tensor()); });
    Tensor qkv = rnd({2, 9, 3 * 144}, 143).to(kGpu);
    Tensor out = Tensor::empty({2, 9, 144}, Dtype::Float32, kGpu), lse = Tensor::empty({2, 1, 9}, Dtype::Float64, kGpu);
    check_error([&] {
      kernel::attention_forward(On{kGpu.index, int(Dtype::Float32)}, fused_qkv_args(qkv, 1, Tensor(), false),
                                merged_out(out, 1), lse.raw_data(), nullptr);
    }, "attention: head size 144 exceeds the fused CUDA kernels' 128");
  }
}

namespace {

// `count` random parameters of shapes [i + 3, cols], each on the CPU and (the same values) on the GPU.
std::pair<std::vector<Tensor>, std::vector<Tensor>> parameter_pairs(int count, int64_t cols, uint64_t seed) {
  std::vector<Tensor> cpu_params, gpu_params;
  for (int i = 0; i < count; ++i) {
    Tensor p = rnd({int64_t(3 + i), cols}, seed + uint64_t(i));
    cpu_params.push_back(p.clone().requires_grad_());
    gpu_params.push_back(p.to(kGpu).requires_grad_());
  }
  return {cpu_params, gpu_params};
}

// The first `first` parameters with weight decay `decay`, the rest without.
std::vector<optim::ParamGroup> two_groups(const std::vector<Tensor>& params, size_t first, double decay) {
  std::vector<Tensor> a(params.begin(), params.begin() + long(first)), b(params.begin() + long(first), params.end());
  return {{a, decay}, {b, 0.0}};
}

}  // namespace

TEST_CASE("cuda ops: AdamW's fused multi-tensor step and clip_grad_norm match the CPU") {
  if (skip_without_cuda()) return;
  auto [cpu_params, gpu_params] = parameter_pairs(40, 5, 140);  // more than one launch's worth (32 tensors)
  optim::AdamW cpu_opt(two_groups(cpu_params, 20, 0.1), 1e-2), gpu_opt(two_groups(gpu_params, 20, 0.1), 1e-2);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      Tensor g = rnd(cpu_params[i].shape(), 500 + uint64_t(step * 100 + i), -3, 3);
      cpu_params[i].set_grad(g);
      gpu_params[i].set_grad(g.to(kGpu));
    }
    double n_cpu = optim::clip_grad_norm(cpu_params, 1.0), n_gpu = optim::clip_grad_norm(gpu_params, 1.0);
    CHECK(n_gpu == doctest::Approx(n_cpu).epsilon(1e-10));
    cpu_opt.step();
    gpu_opt.step();
  }
  for (size_t i = 0; i < cpu_params.size(); ++i) check_close(gpu_params[i].to(Device::cpu()), cpu_params[i], 1e-5);
}

TEST_CASE("cuda ops: scale_all_ and clip_grad_norm_ on the GPU give the CPU's bits, bfloat16 and strided too") {
  if (skip_without_cuda()) return;
  Generator gen(5);
  std::vector<Tensor> cpu{uniform({40}, -2, 2, gen, Dtype::Float32), uniform({3, 5}, -2, 2, gen, Dtype::Float32),
                          uniform({4, 6}, -2, 2, gen, Dtype::Float32).transpose(0, 1),
                          uniform({9}, -2, 2, gen, Dtype::Float32).to(Dtype::BFloat16)};
  std::vector<Tensor> gpu;
  for (const Tensor& t : cpu) gpu.push_back(t.dim() == 2 && !t.is_contiguous() ? t.transpose(0, 1).to(kGpu).transpose(0, 1)
                                                                               : t.to(kGpu));
  scale_all_(cpu, 0.3);
  scale_all_(gpu, 0.3);  // one launch for the contiguous float32 ones; mul_ for the strided and the bfloat16
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("tensor " << i);
    CHECK(gpu[i].to(Device::cpu()).to_vector<double>() == cpu[i].to_vector<double>());
  }
  // clip_grad_norm_ over float32 gradients: the norm stays on the GPU, the same number and scaling as the CPU's.
  auto [cpu_params, gpu_params] = parameter_pairs(6, 3, 40);
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    Tensor g = rnd(cpu_params[i].shape(), 70 + uint64_t(i), -3, 3);
    cpu_params[i].set_grad(g);
    gpu_params[i].set_grad(g.to(kGpu));
  }
  const Tensor n_cpu = optim::clip_grad_norm_(cpu_params, 1.0), n_gpu = optim::clip_grad_norm_(gpu_params, 1.0);
  CHECK(n_gpu.device() == kGpu);
  CHECK(n_gpu.item<double>() == doctest::Approx(n_cpu.item<double>()).epsilon(1e-12));
  for (size_t i = 0; i < cpu_params.size(); ++i) check_close(gpu_params[i].grad().to(Device::cpu()), cpu_params[i].grad(), 1e-6);
}

TEST_CASE("cuda ops: uniform_ and normal_ fill a GPU tensor with the CPU's numbers for the same seed") {
  if (skip_without_cuda()) return;
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    INFO(dtype_name(dtype));
    Generator cpu_gen(31), gpu_gen(31);
    Tensor c = Tensor::empty({1000, 3}, dtype), g = Tensor::empty({1000, 3}, dtype, kGpu);
    uniform_(c, -2, 5, cpu_gen);
    uniform_(g, -2, 5, gpu_gen);
    check_close(g.to(Device::cpu()), c, 1e-12);
    CHECK(gpu_gen.offset() == cpu_gen.offset());
    normal_(c, 1, 3, cpu_gen);  // the next range of the same generators
    normal_(g, 1, 3, gpu_gen);
    check_close(g.to(Device::cpu()), c, 1e-12);
    CHECK(mean(c).item<double>() == doctest::Approx(1).epsilon(0.2));
  }
}

TEST_CASE("cuda ops: SGD's fused multi-tensor step matches the CPU, with and without momentum") {
  if (skip_without_cuda()) return;
  for (double momentum : {0.0, 0.9}) {
    INFO("momentum " << momentum);
    auto [cpu_params, gpu_params] = parameter_pairs(35, 3, 700);  // more than one launch's worth (32 tensors)
    optim::SGD cpu_opt(two_groups(cpu_params, 10, 0.05), 0.1, momentum),
        gpu_opt(two_groups(gpu_params, 10, 0.05), 0.1, momentum);
    const Tensor untouched = cpu_params[4].detach().clone();
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < cpu_params.size(); ++i) {
        if (i == 4) continue;  // a parameter without a gradient is left alone on both devices
        Tensor g = rnd(cpu_params[i].shape(), 900 + uint64_t(step * 100 + i), -2, 2);
        cpu_params[i].set_grad(g);
        gpu_params[i].set_grad(g.to(kGpu));
      }
      cpu_opt.step();
      gpu_opt.step();
    }
    CHECK(gpu_opt.state_dict().size() == cpu_opt.state_dict().size());
    check_close(gpu_params[4].to(Device::cpu()), untouched, 0.0);  // no gradient: not moved
    for (size_t i = 0; i < cpu_params.size(); ++i) check_close(gpu_params[i].to(Device::cpu()), cpu_params[i], 1e-6);
  }
}

TEST_CASE("cuda ops: one training step of the recipe's model gives the CPU's loss, gradients and update") {
  if (skip_without_cuda()) return;
  nn::ClassifierConfig config;
  config.vocab_size = 300;
  config.max_len = 24;
  config.dim = 32;
  config.heads = 4;
  config.layers = 2;
  config.ffn_dim = 64;
  config.dropout = 0.1;  // on: the masks are the same on both devices
  Generator gen_cpu(7), gen_gpu(7);
  nn::TransformerClassifier cpu_model(config, gen_cpu), gpu_model(config, gen_gpu);
  gpu_model.to(kGpu);
  const int64_t B = 4, T = 20;
  std::vector<int64_t> tokens(size_t(B * T));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t((i * 37 + 11) % 300);
  Tensor tok = from_vector(tokens, {B, T});
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) mask.data<bool>()[b * T + t] = t >= T - 3 * b;  // 0, 3, 6, 9 padded
  Tensor labels = from_vector(std::vector<int64_t>{0, 1, 1, 0});
  optim::AdamW cpu_opt(imdb::parameter_groups(cpu_model, 0.01), 1e-3), gpu_opt(imdb::parameter_groups(gpu_model, 0.01), 1e-3);
  cpu_model.train();
  gpu_model.train();
  for (int step = 0; step < 2; ++step) {
    Tensor loss_cpu = cross_entropy(cpu_model.forward(tok, mask), labels);
    Tensor loss_gpu = cross_entropy(gpu_model.forward(tok.to(kGpu), mask.to(kGpu)), labels.to(kGpu));
    CHECK(loss_gpu.item<float>() == doctest::Approx(loss_cpu.item<float>()).epsilon(1e-5));
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    loss_cpu.backward();
    loss_gpu.backward();
    auto cpu_named = cpu_model.named_parameters(), gpu_named = gpu_model.named_parameters();
    REQUIRE(cpu_named.size() == gpu_named.size());
    for (size_t i = 0; i < cpu_named.size(); ++i) {
      INFO("gradient of " << cpu_named[i].first << " at step " << step);
      check_close(gpu_named[i].second.grad().to(Device::cpu()), cpu_named[i].second.grad(), 1e-4);
    }
    optim::clip_grad_norm(cpu_model.parameters(), 1.0);
    optim::clip_grad_norm(gpu_model.parameters(), 1.0);
    cpu_opt.step();
    gpu_opt.step();
  }
  auto cpu_named = cpu_model.named_parameters(), gpu_named = gpu_model.named_parameters();
  for (size_t i = 0; i < cpu_named.size(); ++i) {
    INFO("parameter " << cpu_named[i].first);
    check_close(gpu_named[i].second.to(Device::cpu()), cpu_named[i].second, 1e-4);
  }
}

TEST_CASE("cuda ops: Tensor::to is differentiable across devices") {
  if (skip_without_cuda()) return;
  Tensor x = rnd({4, 5}, 150).requires_grad_();
  Tensor y = (x.to(kGpu) * 3.0).to(Device::cpu());
  CHECK(y.device() == Device::cpu());
  y.backward(ones({4, 5}));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == Device::cpu());
  check_values(x.grad(), std::vector<double>(20, 3.0), 0);
}

namespace {

// The tiny IMDb run of config_for(name, device) on the CPU and on the GPU, on the same data: every
// step's loss on the GPU within `epsilon` (relative) of the CPU's.
struct BothRuns {
  imdb::TrainConfig gpu_config;
  imdb::Data data;
  imdb::RunResult on_cpu, on_gpu;
};
BothRuns train_on_cpu_and_gpu(const std::function<imdb::TrainConfig(const std::string&, const std::string&)>& config_for,
                              double epsilon) {
  const imdb::TrainConfig cpu_config = config_for("cpu", "cpu");
  BothRuns runs{config_for("gpu", "cuda"), imdb::prepare_data(cpu_config), {}, {}};
  runs.on_cpu = imdb::train_classifier(cpu_config, runs.data);
  runs.on_gpu = imdb::train_classifier(runs.gpu_config, runs.data);
  REQUIRE(runs.on_gpu.step_losses.size() == runs.on_cpu.step_losses.size());
  REQUIRE(!runs.on_cpu.step_losses.empty());
  for (size_t i = 0; i < runs.on_cpu.step_losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(runs.on_gpu.step_losses[i] == doctest::Approx(runs.on_cpu.step_losses[i]).epsilon(epsilon));
  }
  return runs;
}

}  // namespace

TEST_CASE("cuda trainer: --device cuda trains the CPU's losses, reports GPU memory, and resumes exactly") {
  if (skip_without_cuda()) return;
  namespace fs = std::filesystem;
  auto config_for = [](const std::string& name, const std::string& device) {
    imdb::TrainConfig c = tiny_train_config("ember_cuda_train", name);
    c.epochs = 2;
    c.device = device;
    // On the CPU emulator, reviews cut to 16 tokens instead of 64: the run then takes about a
    // quarter of the time (the row kernels' barriers dominate: 256 fibers per row).
    if (cuda_emulated()) c.model.max_len = 16;
    return c;
  };
  const BothRuns both = train_on_cpu_and_gpu(config_for, 1e-3);
  const imdb::RunResult &on_cpu = both.on_cpu, &on_gpu = both.on_gpu;
  const imdb::TrainConfig& gpu_config = both.gpu_config;
  const imdb::Data& data = both.data;
  REQUIRE(on_gpu.epochs.size() == 2);
  // --cuda-graph is on by default on a GPU: after each shape's first step, the steps are replayed.
  CHECK(on_gpu.graph_replays > on_gpu.steps / 2);
  CHECK(on_gpu.epochs.back().gpu_peak_bytes > 0);
  CHECK(on_gpu.epochs.back().gpu_peak_bytes >= on_gpu.epochs.back().gpu_allocated_bytes);
  CHECK(on_cpu.epochs.back().gpu_peak_bytes == 0);
  CHECK(fs::exists(gpu_config.out + "/report.html"));
  // Stopped part-way and resumed on the GPU: the same losses, bit for bit, as the whole GPU run.
  imdb::TrainConfig part = config_for("gpu-parts", "cuda");
  part.stop_after = 11;
  imdb::RunResult part1 = imdb::train_classifier(part, data);
  part.stop_after = 0;
  part.resume = true;
  imdb::RunResult part2 = imdb::train_classifier(part, data);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(joined == on_gpu.step_losses);
}

TEST_CASE("cuda trainer: --precision bf16 on the GPU trains as the CPU's bf16 run, not as its own float32 run") {
  if (skip_without_cuda()) return;
  auto config_for = [](const std::string& name, const std::string& device) {
    imdb::TrainConfig c = tiny_train_config("ember_cuda_train_bf16", name);
    c.epochs = 1;
    c.device = device;
    c.precision = "bf16";
    if (cuda_emulated()) c.model.max_len = 16;  // as in the case above
    return c;
  };
  // The same bfloat16 roundings of sums taken in another order, and attention's float32 path on the GPU
  // (a bfloat16 qkv widened there): the losses agree closely (8e-5 relative at most on the emulator, 13
  // steps), not bit for bit.
  const BothRuns bf16 = train_on_cpu_and_gpu(config_for, 1e-3);
  CHECK(product_precision() == Precision::Float32);
  // And the GPU did train in bfloat16, not float32: the same run with --precision fp32 on the GPU gives other
  // losses. (Closeness cannot show it on this small model: its bfloat16 and float32 losses differ by 6e-5, as
  // much as the two devices' bfloat16 ones. That the GPU linear returns bfloat16 in the scope, so that the
  // activations between layers are bfloat16, is tests/core/test_mixed_precision.cpp's.)
  imdb::TrainConfig fp32_config = config_for("gpu-fp32", "cuda");
  fp32_config.precision = "fp32";
  const imdb::RunResult fp32 = imdb::train_classifier(fp32_config, bf16.data);
  REQUIRE(fp32.step_losses.size() == bf16.on_gpu.step_losses.size());
  CHECK(fp32.step_losses != bf16.on_gpu.step_losses);
}

TEST_CASE("cuda trainer: --bigrams on the GPU (staged with the tokens, graphs and op by op) trains the CPU's losses") {
  if (skip_without_cuda()) return;
  auto config_for = [](const std::string& name, const std::string& device) {
    imdb::TrainConfig c = tiny_train_config("ember_cuda_train_bigrams", name);
    c.epochs = 1;
    c.device = device;
    c.model.bigram_buckets = 97;
    if (cuda_emulated()) c.model.max_len = 16;  // as in the cases above
    return c;
  };
  const BothRuns graphs = train_on_cpu_and_gpu(config_for, 1e-3);  // --cuda-graph on (the GPU's default)
  CHECK(graphs.on_gpu.graph_replays > graphs.on_gpu.steps / 2);
  CHECK(graphs.on_gpu.epochs.back().test_accuracy == doctest::Approx(graphs.on_cpu.epochs.back().test_accuracy));
  imdb::TrainConfig eager = config_for("gpu-eager", "cuda");
  eager.cuda_graph = "off";
  const imdb::RunResult op_by_op = imdb::train_classifier(eager, graphs.data);
  REQUIRE(op_by_op.step_losses.size() == graphs.on_gpu.step_losses.size());
  for (size_t i = 0; i < op_by_op.step_losses.size(); ++i)  // (graph batches are padded to 32 tokens: not bit for bit)
    CHECK(op_by_op.step_losses[i] == doctest::Approx(graphs.on_gpu.step_losses[i]).epsilon(1e-4));
  // The pairs did learn: the run without them trains other losses.
  imdb::TrainConfig none = config_for("gpu-none", "cuda");
  none.model.bigram_buckets = 0;
  CHECK(imdb::train_classifier(none, graphs.data).step_losses != graphs.on_gpu.step_losses);
}

TEST_CASE("cuda allocator: blocks are reused (no cudaMalloc in a steady loop), statistics and out-of-memory") {
  if (skip_without_cuda()) return;
  auto step = [] {
    Tensor a = full({1000, 37}, 1.0, Dtype::Float32, kGpu);
    Tensor b = full({3, 5000}, 2.0, Dtype::Float32, kGpu);
    return sum(a).item<float>() + sum(b).item<float>();
  };
  CHECK(step() == 67000.0f);
  const int64_t mallocs = cuda::cudamalloc_count(0);
  for (int i = 0; i < 10; ++i) CHECK(step() == 67000.0f);
  CHECK(cuda::cudamalloc_count(0) == mallocs);  // the steady state asks the driver for nothing

  MemoryStats before = memory_stats(kGpu);
  reset_peak_memory(kGpu);
  {
    Tensor big = Tensor::empty({1 << 20}, Dtype::Float32, kGpu);
    MemoryStats during = memory_stats(kGpu);
    CHECK(during.allocated >= before.allocated + (4 << 20));
    CHECK(during.peak_allocated >= during.allocated);
    CHECK(during.reserved >= during.allocated);
  }
  MemoryStats after = memory_stats(kGpu);
  CHECK(after.allocated == before.allocated);
  CHECK(after.peak_allocated >= before.allocated + (4 << 20));
  CHECK(after.reserved >= before.reserved);  // the block is cached, not freed
  // 2^43 floats = 32 TiB: more than any GPU; the message gives the bytes asked for and in use.
  check_error([] { Tensor::empty({int64_t(1) << 43}, Dtype::Float32, kGpu); },
              "out of GPU memory on cuda:0: asked for 35184372088832 bytes");
  check_error([] { Tensor::empty({4}, Dtype::Float32, Device::cuda(cuda_device_count())); }, "is not available");
}

// What a machine without a GPU sees: clear errors, never a crash (this runs in CI).
TEST_CASE("cuda (no GPU): asking for a GPU anywhere is a clear error") {
  if (cuda_device_count() > 0) return skip_test("this process has a CUDA device (the no-GPU path is tested without one)");
  check_error([] { Tensor::empty({2}, Dtype::Float32, kGpu); }, "CUDA");
  check_error([] { zeros({2}, Dtype::Int64, Device::cuda(1)); }, "CUDA");
  check_error([] { rnd({3}, 1).to(kGpu); }, "CUDA");
  check_error([] { imdb::checked_device("cuda"); }, "no CUDA device is available");
  check_error([] { imdb::checked_device("cuda:2"); }, "no CUDA device is available");
  CHECK(imdb::checked_device("cpu") == Device::cpu());
  Generator gen(1);
  nn::ClassifierConfig config;
  config.vocab_size = 10;
  config.dim = 8;
  config.heads = 2;
  config.layers = 1;
  config.ffn_dim = 8;
  nn::TransformerClassifier model(config, gen);
  check_error([&] { model.to(kGpu); }, "CUDA");
  CHECK(model.parameters().front().device() == Device::cpu());  // nothing moved
  CHECK_FALSE(cuda::allow_tf32());
}
