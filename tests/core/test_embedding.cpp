// embedding: row lookup against known values, repeated ids summed in the gradient (deterministic
// for any thread count), gradcheck, and the error for out-of-range ids.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("embedding: picks rows of the weight") {
  Tensor weight = tensor({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}).to(device);
  Tensor ids = from_vector<int64_t>({3, 0, 3, 1, 2, 2}, {2, 3}).to(device);
  Tensor out = embedding(weight, ids);
  CHECK(out.shape() == Shape{2, 3, 2});
  CHECK(out.dtype() == Dtype::Float32);
  check_values(out, {30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21});
  // int32 ids, a 0-dim id, a transposed (strided) weight and non-contiguous ids.
  check_values(embedding(weight, from_vector<int32_t>({2, 1}).to(device)), {20, 21, 10, 11});
  Tensor one = embedding(weight, scalar(1, Dtype::Int64).to(device));
  CHECK(one.shape() == Shape{2});
  check_values(one, {10, 11});
  Tensor wt = tensor({0, 10, 20, 30, 1, 11, 21, 31}, {2, 4}).to(device).transpose(0, 1);  // same values as weight
  check_values(embedding(wt, ids), {30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21});
  check_values(embedding(weight, ids.transpose(0, 1)), {30, 31, 10, 11, 0, 1, 20, 21, 30, 31, 20, 21});
  Tensor none = embedding(weight, from_vector<int64_t>({}, {0}).to(device));
  CHECK(none.shape() == Shape{0, 2});
}

DEVICE_TEST_CASE("embedding: gradient sums the rows of repeated ids") {
  Tensor weight = zeros({5, 3}, Dtype::Float64, device).requires_grad_();
  Tensor ids = from_vector<int64_t>({1, 3, 1, 1, 0}, {5}).to(device);
  Tensor g = tensor({1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000, 7, 8, 9}, {5, 3}, Dtype::Float64).to(device);
  embedding(weight, ids).backward(g);
  REQUIRE(weight.grad().defined());
  CHECK(weight.grad().shape() == Shape{5, 3});
  check_values(weight.grad(), {7, 8, 9, 1101, 2202, 3303, 0, 0, 0, 10, 20, 30, 0, 0, 0}, 1e-12);
}

DEVICE_TEST_CASE("embedding: few ids in a large table (the backward sorts them by row) sum the same way") {
  // 6 ids in 4,096 rows: fewer than one in eight, the sorted path of bucket_by_row.
  Tensor weight = zeros({4096, 2}, Dtype::Float64, device).requires_grad_();
  Tensor ids = from_vector<int64_t>({3, 4000, 3, 17, 4000, 3}, {2, 3}).to(device);
  Tensor g = tensor({1, 2, 10, 20, 100, 200, 1000, 2000, 1e4, 2e4, 1e5, 2e5}, {2, 3, 2}, Dtype::Float64).to(device);
  embedding(weight, ids).backward(g);
  const std::vector<double> grad = weight.grad().to(Device::cpu()).to_vector<double>();
  std::vector<double> expected(4096 * 2, 0.0);
  expected[3 * 2] = 1 + 100 + 1e5, expected[3 * 2 + 1] = 2 + 200 + 2e5;
  expected[4000 * 2] = 10 + 1e4, expected[4000 * 2 + 1] = 20 + 2e4;
  expected[17 * 2] = 1000, expected[17 * 2 + 1] = 2000;
  CHECK(grad == expected);
  // In position order, as the counting path adds them: the float32 sums of both paths agree bit for bit.
  Generator gen(9);
  Tensor many = (rand({300}, gen, Dtype::Float64) * 40.0).to(Dtype::Int64).to(device);  // repeats, 300 ids
  Tensor gm = randn({300, 8}, gen).to(device);
  auto grad_of = [&](int64_t rows) {
    Tensor w = zeros({rows, 8}, Dtype::Float32, device).requires_grad_();
    embedding(w, many).backward(gm);
    return w.grad().narrow(0, 0, 40).to(Device::cpu()).to_vector<float>();
  };
  CHECK(grad_of(40) == grad_of(100000));  // 300 * 8 > 40: counted; 300 * 8 < 100,000: sorted
  check_gradient(device, [device](auto& in) { return embedding(in[0], from_vector<int64_t>({5, 60, 5}).to(device)); },
                 {random64({64, 3}, 4)});
}

TEST_CASE("embedding: gradient is identical for 1 and 2 threads") {
  Generator gen(5);
  Tensor ids = (rand({4000}, gen, Dtype::Float64) * 37.0).to(Dtype::Int64);  // many repeats
  Tensor g = randn({4000, 64}, gen);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor weight = zeros({37, 64}).requires_grad_();
    embedding(weight, ids).backward(g);
    return weight.grad().to_vector<float>();
  };
  int saved = num_threads();
  std::vector<float> one = run(1), two = run(2);
  set_num_threads(saved);
  CHECK(one == two);  // bit for bit
  // And equal to a sequential sum in position order.
  std::vector<int64_t> id = ids.to_vector<int64_t>();
  std::vector<float> gv = g.to_vector<float>(), expected(37 * 64, 0.0f);
  for (size_t i = 0; i < id.size(); ++i)
    for (size_t j = 0; j < 64; ++j) expected[size_t(id[i]) * 64 + j] += gv[i * 64 + j];
  CHECK(one == expected);
}

DEVICE_TEST_CASE("gradcheck: embedding") {
  Tensor ids = from_vector<int64_t>({2, 0, 2, 3, 2, 1}, {3, 2}).to(device);
  check_gradient(device, [ids](auto& in) { return embedding(in[0], ids); }, {random64({4, 3}, 1)});
  check_gradient(device, [ids](auto& in) { return embedding(in[0].transpose(0, 1), ids) * 2.0; }, {random64({3, 4}, 2)});
  check_gradient(device, [device](auto& in) { return embedding(in[0].narrow(1, 1, 2), from_vector<int32_t>({0, 0, 1}).to(device)); },
                 {random64({2, 4}, 3)});
}

TEST_CASE("embedding: errors") {
  Tensor weight = zeros({50, 4});
  check_error([&] { embedding(weight, from_vector<int64_t>({1, 2, 3, 70, 5, 6}, {2, 3})); },
              "embedding: id 70 at position [1, 0] of ids [2, 3] is out of range for a vocabulary of 50 rows");
  check_error([&] { embedding(weight, from_vector<int32_t>({-1})); }, "id -1 at position [0]");
  check_error([&] { embedding(weight, from_vector<int64_t>({50})); }, "id 50 at position [0]");
  check_error([&] { embedding(weight, tensor({1, 2})); }, "embedding: ids must be int32 or int64, got float32");
  check_error([&] { embedding(zeros({50}), from_vector<int64_t>({1})); }, "embedding: weight must be 2-D [V, D], got shape [50]");
}
