// matmul: known products, a triple-loop reference on random odd shapes (batched, broadcast,
// transposed, sliced, float32 and float64), gradchecks, no copies of transposed operands, errors.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// The product computed in double by a plain triple loop, batch dims broadcast explicitly.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "reference");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape sa = batch, sb = batch, sc = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  sc.insert(sc.end(), {M, N});
  std::vector<double> x = a.detach().expand(sa).to_vector<double>();
  std::vector<double> y = b.detach().expand(sb).to_vector<double>();
  std::vector<double> z(size_t(numel(sc)), 0.0);
  const int64_t count = numel(batch);
  for (int64_t p = 0; p < count; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += x[size_t(p * M * K + i * K + k)] * y[size_t(p * K * N + k * N + j)];
        z[size_t(p * M * N + i * N + j)] = s;
      }
  return from_vector(z, sc);
}

Tensor random_tensor(const Shape& shape, uint64_t seed, Dtype dtype, Device device = Device::cpu()) {
  Generator gen(seed);
  return uniform(shape, -1.0, 1.0, gen, dtype).to(device);
}

void check_against_reference(const Tensor& a, const Tensor& b) {
  Tensor got = matmul(a, b);
  Tensor want = reference_matmul(a, b);
  INFO(shape_str(a.shape()) << " (strides " << shape_str(a.strides()) << ") @ " << shape_str(b.shape())
                            << " (strides " << shape_str(b.strides()) << ") " << dtype_name(a.dtype()));
  CHECK(got.dtype() == a.dtype());
  CHECK(got.device() == a.device());
  CHECK(got.is_contiguous());
  check_close(got, want, a.dtype() == Dtype::Float32 ? 2e-5 : 1e-12);
}

}  // namespace

DEVICE_TEST_CASE("matmul: small products against hand-computed values") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2}).to(device);
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 2});
  check_values(c, {58, 64, 139, 154});
  // Transposed views: a^T @ a is [3, 3].
  check_values(matmul(a.transpose(0, 1), a), {17, 22, 27, 22, 29, 36, 27, 36, 45});
  check_values(matmul(b.transpose(0, 1), a.transpose(0, 1)), {58, 139, 64, 154});
  // Batched: two 2x2 products with a shared right operand.
  Tensor batch = tensor({1, 0, 0, 1, 2, 0, 0, 3}, {2, 2, 2}).to(device);
  Tensor m = tensor({1, 2, 3, 4}, {2, 2}).to(device);
  Tensor bc = matmul(batch, m);
  CHECK(bc.device() == device);
  CHECK(bc.shape() == Shape{2, 2, 2});
  check_values(bc, {1, 2, 3, 4, 2, 4, 9, 12});
  check_values(matmul(m, batch), {1, 2, 3, 4, 2, 6, 6, 12});
}

DEVICE_TEST_CASE("matmul: 1-D operands follow NumPy") {
  Tensor m = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor v3 = tensor({1, 0, -1}).to(device);
  Tensor v2 = tensor({2, -1}).to(device);
  Tensor mv = matmul(m, v3);  // matrix-vector
  CHECK(mv.shape() == Shape{2});
  check_values(mv, {-2, -2});
  Tensor vm = matmul(v2, m);  // vector-matrix
  CHECK(vm.shape() == Shape{3});
  check_values(vm, {-2, -1, 0});
  Tensor dot = matmul(v3, tensor({4, 5, 6}).to(device));
  CHECK(dot.shape() == Shape{});
  check_values(dot, {-2});
  // Against batches: [K] @ [B, K, N] -> [B, N]; [B, M, K] @ [K] -> [B, M].
  Tensor batch = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2}).to(device);
  Tensor vb = matmul(v3, batch);
  CHECK(vb.shape() == Shape{2, 2});
  check_values(vb, {-4, -4, -4, -4});
  Tensor bv = matmul(batch.transpose(1, 2), v3);
  CHECK(bv.shape() == Shape{2, 2});
  check_values(bv, {-4, -4, -4, -4});
}

DEVICE_TEST_CASE("matmul: random odd shapes against a triple loop, float32 and float64") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    uint64_t seed = 100;
    for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {1, 7, 1}, {7, 13, 5}, {33, 17, 65}, {5, 300, 9}, {130, 70, 47}, {64, 64, 64}, {1, 40, 37}, {37, 40, 1}}) {
      check_against_reference(random_tensor({M, K}, seed, dtype, device), random_tensor({K, N}, seed + 1, dtype, device));
      seed += 2;
    }
  }
}

DEVICE_TEST_CASE("matmul: batched with broadcast batch dims") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    // Attention-like: [B, H, L, D] @ [B, H, D, L].
    check_against_reference(random_tensor({2, 3, 5, 4}, 1, dtype, device), random_tensor({2, 3, 4, 5}, 2, dtype, device));
    // Broadcast batch dims on both sides.
    check_against_reference(random_tensor({2, 1, 5, 4}, 3, dtype, device), random_tensor({3, 4, 6}, 4, dtype, device));
    check_against_reference(random_tensor({3, 5, 4}, 5, dtype, device), random_tensor({2, 1, 4, 6}, 6, dtype, device));
    // [B, T, C] @ [C, N]: folded into one GEMM; also with M == 1.
    check_against_reference(random_tensor({4, 7, 9}, 7, dtype, device), random_tensor({9, 11}, 8, dtype, device));
    check_against_reference(random_tensor({4, 1, 9}, 9, dtype, device), random_tensor({9, 11}, 10, dtype, device));
    // A shared left operand against a batch.
    check_against_reference(random_tensor({5, 4}, 11, dtype, device), random_tensor({3, 4, 6}, 12, dtype, device));
    // Size-0 dims.
    check_against_reference(random_tensor({2, 0, 4}, 13, dtype, device), random_tensor({4, 3}, 14, dtype, device));
    check_against_reference(random_tensor({0, 5, 4}, 15, dtype, device), random_tensor({4, 3}, 16, dtype, device));
  }
  // K == 0: a sum over nothing is 0, whatever was in the output memory.
  Tensor z = matmul(zeros({3, 0}, Dtype::Float32, device), zeros({0, 2}, Dtype::Float32, device));
  CHECK(z.shape() == Shape{3, 2});
  check_values(z, {0, 0, 0, 0, 0, 0});
}

DEVICE_TEST_CASE("matmul: transposed, permuted, sliced and expanded operands") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    Tensor x = random_tensor({13, 9}, 20, dtype, device);
    Tensor y = random_tensor({11, 13}, 21, dtype, device);
    check_against_reference(x.transpose(0, 1), y.transpose(0, 1));          // both column-major
    check_against_reference(y, x);
    check_against_reference(x.narrow(1, 2, 5).transpose(0, 1), y.narrow(0, 1, 7).transpose(0, 1));
    check_against_reference(x.narrow(0, 3, 9).transpose(0, 1), y.transpose(0, 1).narrow(0, 2, 9).narrow(1, 1, 8));
    check_against_reference(x.narrow(0, 1, 11).narrow(1, 0, 4).transpose(0, 1), x.narrow(0, 1, 11));
    // Neither matrix dim has unit stride: every other element.
    Tensor strided = random_tensor({7, 6, 2}, 22, dtype, device).select(2, 1);      // [7, 6], strides [12, 2]
    check_against_reference(strided, random_tensor({6, 5}, 23, dtype, device));
    check_against_reference(random_tensor({3, 7}, 24, dtype, device), strided);
    // Batch dims that cannot be merged (permuted) and a column-major batch.
    Tensor p = random_tensor({3, 2, 5, 4}, 25, dtype, device).permute({1, 0, 2, 3});  // [2, 3, 5, 4]
    Tensor q = random_tensor({2, 3, 6, 4}, 26, dtype, device).transpose(2, 3);        // [2, 3, 4, 6]
    check_against_reference(p, q);
    Tensor r = random_tensor({4, 3, 2, 5}, 27, dtype, device).permute({2, 1, 3, 0});  // [2, 3, 5, 4], no unit-stride batch
    check_against_reference(r, q);
    // Three batch dims, none mergeable with its neighbour: two walked by the odometer.
    Tensor u = random_tensor({2, 2, 3, 5, 4}, 35, dtype, device).permute({2, 1, 0, 3, 4});  // [3, 2, 2, 5, 4]
    check_against_reference(u, random_tensor({3, 2, 2, 4, 6}, 36, dtype, device));
    check_against_reference(u, random_tensor({2, 1, 4, 6}, 37, dtype, device));
    // M == 1 rows that are not K apart (folded with the batch stride as the row stride).
    check_against_reference(random_tensor({3, 10, 12}, 38, dtype, device).narrow(1, 2, 1).narrow(2, 0, 6),
                            random_tensor({6, 8}, 39, dtype, device));
    // [B, T, C] sliced along C (rows still foldable) and along T (not foldable).
    Tensor w = random_tensor({6, 8}, 28, dtype, device);
    Tensor big = random_tensor({3, 10, 12}, 29, dtype, device);
    check_against_reference(big.narrow(2, 2, 6), w);
    check_against_reference(big.narrow(1, 1, 7).narrow(2, 0, 6), w);
    check_against_reference(big.narrow(2, 2, 6), w.transpose(0, 1).transpose(0, 1));
    check_against_reference(big.narrow(2, 3, 6), random_tensor({8, 6}, 30, dtype, device).transpose(0, 1));
    // An expanded (stride-0) batch on either side.
    check_against_reference(random_tensor({5, 6}, 31, dtype, device).expand({4, 5, 6}), random_tensor({4, 6, 3}, 32, dtype, device));
    check_against_reference(random_tensor({4, 5, 6}, 33, dtype, device), random_tensor({6, 3}, 34, dtype, device).expand({4, 6, 3}));
  }
}

TEST_CASE("matmul: transposed operands are read in place, never copied") {
  Tensor x = random_tensor({2048, 64}, 40, Dtype::Float32);
  Tensor y = random_tensor({2048, 8}, 41, Dtype::Float32);
  Tensor w = random_tensor({32, 2048}, 42, Dtype::Float32);
  reset_peak_memory();
  int64_t before = memory_stats().allocated;
  Tensor c = matmul(x.transpose(0, 1), y);  // [64, 8]: 2 KiB out; a copy of x^T would be 512 KiB
  Tensor d = matmul(y.transpose(0, 1), w.transpose(0, 1));  // [8, 32]
  int64_t extra = memory_stats().peak_allocated - before;
  CHECK(extra < 64 * 1024);
  check_close(c, reference_matmul(x.transpose(0, 1), y), 2e-5);
  check_close(d, reference_matmul(y.transpose(0, 1), w.transpose(0, 1)), 2e-5);
}

TEST_CASE("matmul: the weight gradient of [B, T, C] @ [C, N] is one GEMM, not a batch and a sum") {
  Tensor x = random64({256, 8, 16}, 45);
  Tensor w = random64({16, 8}, 46).requires_grad_();
  Tensor y = matmul(x, w);
  Tensor g = random64({256, 8, 8}, 47);
  reset_peak_memory();
  int64_t before = memory_stats().allocated;
  y.backward(g);
  // A per-batch [256, 16, 8] product before summing would take 256 KiB.
  CHECK(memory_stats().peak_allocated - before < 64 * 1024);
  check_close(w.grad(), reference_matmul(x.reshape({-1, 16}).transpose(0, 1), g.reshape({-1, 8})), 1e-12);
}

DEVICE_TEST_CASE("gradcheck: matmul") {
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({3, 4}, 1), random64({4, 5}, 2)});
  // Batched with broadcast on both sides.
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({2, 1, 3, 4}, 3), random64({3, 4, 2}, 4)});
  // [B, T, C] @ [C, N] (the right gradient folds the batch into one GEMM), and the mirror case.
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({2, 3, 4}, 5), random64({4, 5}, 6)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({3, 4}, 7), random64({2, 4, 5}, 8)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({1, 3, 4}, 9), random64({2, 1, 4, 2}, 10)});
  // Transposed operands (gradients computed column-major) and a linear layer x @ W^T.
  check_gradient(device, [](auto& in) { return matmul(in[0].transpose(0, 1), in[1].transpose(0, 1)); },
                 {random64({4, 3}, 11), random64({5, 4}, 12)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1].transpose(0, 1)); }, {random64({2, 3, 4}, 13), random64({5, 4}, 14)});
  check_gradient(device, [](auto& in) { return matmul(in[0].transpose(-1, -2), in[1].transpose(1, 2)); },
                 {random64({2, 4, 3}, 15), random64({2, 5, 4}, 16)});
  // Sliced, and neither matrix dim unit-stride.
  check_gradient(device, [](auto& in) { return matmul(in[0].narrow(1, 1, 3), in[1].narrow(0, 0, 3)); },
                 {random64({3, 5}, 17), random64({4, 2}, 18)});
  check_gradient(device, [](auto& in) { return matmul(in[0].select(2, 1), in[1]); }, {random64({3, 4, 2}, 19), random64({4, 2}, 20)});
  // 1-D operands.
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({4}, 21), random64({4, 3}, 22)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({3, 4}, 23), random64({4}, 24)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({4}, 25), random64({4}, 26)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({4}, 27), random64({2, 4, 3}, 28)});
  check_gradient(device, [](auto& in) { return matmul(in[0], in[1]); }, {random64({2, 3, 4}, 29), random64({4}, 30)});
  // Only one operand requires grad.
  Tensor constant = random64({4, 2}, 31).to(device);
  check_gradient(device, [constant](auto& in) { return matmul(in[0], constant); }, {random64({3, 4}, 32)});
  check_gradient(device, [constant](auto& in) { return matmul(constant.transpose(0, 1), in[0]); }, {random64({4, 3}, 33)});
}

TEST_CASE("matmul: a linear layer's weight gradient comes back contiguous") {
  // y = x @ W^T with W [N, C] stored row-major: dW is computed directly in W's layout.
  Tensor x = random64({2, 3, 4}, 50);
  Tensor W = random64({5, 4}, 51).requires_grad_();
  sum(matmul(x, W.transpose(0, 1))).backward();
  REQUIRE(W.grad().defined());
  CHECK(W.grad().is_contiguous());
  // dW[n, c] = sum over (b, t) of x[b, t, c].
  std::vector<double> xs = x.to_vector<double>(), expected;
  for (int n = 0; n < 5; ++n)
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (int r = 0; r < 6; ++r) s += xs[size_t(r * 4 + c)];
      expected.push_back(s);
    }
  check_values(W.grad(), expected, 1e-12);
}

TEST_CASE("matmul: errors") {
  check_error([] { matmul(zeros({32, 128}), zeros({64, 16})); }, "matmul: [32, 128] @ [64, 16]: inner dimensions 128 and 64 differ");
  check_error([] { matmul(zeros({3}), zeros({4})); }, "matmul: [3] @ [4]: inner dimensions 3 and 4 differ");
  check_error([] { matmul(zeros({2, 3}), zeros({4})); }, "matmul: [2, 3] @ [4]: inner dimensions 3 and 4 differ");
  check_error([] { matmul(zeros({2, 3}), zeros({3, 4}, Dtype::Float64)); },
              "matmul: [2, 3] @ [3, 4]: dtypes differ (float32 and float64)");
  check_error([] { matmul(scalar(1.0), zeros({3, 4})); }, "matmul: [] @ [3, 4]: both operands need at least 1 dim");
  check_error([] { matmul(zeros({3}), scalar(1.0)); }, "need at least 1 dim");
  check_error([] { matmul(zeros({2, 3}, Dtype::Int64), zeros({3, 4}, Dtype::Int64)); },
              "matmul: expected a floating tensor (float32 or float64), got int64");
  check_error([] { matmul(zeros({2, 5, 3}), zeros({4, 3, 6})); },
              "matmul: [2, 5, 3] @ [4, 3, 6]: batch dimensions [2] and [4] do not broadcast");
}

CUDA_TEST_CASE("matmul: operands on different devices are an error") {
  check_error([] { matmul(zeros({2, 3}), zeros({3, 4}, Dtype::Float32, Device::cuda())); },
              "matmul: tensors on different devices (cpu and cuda:0)");
  check_error([] { matmul(zeros({2, 3}, Dtype::Float32, Device::cuda()), zeros({3, 4})); },
              "matmul: tensors on different devices (cuda:0 and cpu)");
}
