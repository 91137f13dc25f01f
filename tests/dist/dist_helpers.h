// Helpers of the distributed tests (run under mpirun, every rank running every test case in the
// same order): the world group, agreement between ranks, a small model and its batches.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "core/distributed/process_group.h"
#include "nn/transformer.h"

namespace ember::testing {

distributed::ProcessGroup& world();  // set by tests/dist/main.cpp

// Whether `ok` holds on every rank (so that every rank takes the same branch afterwards).
inline bool on_every_rank(bool ok) {
  Tensor flag = from_vector(std::vector<int32_t>{ok ? 0 : 1}, {1}, world().device());
  world().all_reduce(flag, distributed::ReduceOp::Max);
  return flag.to(Device::cpu()).item<int32_t>() == 0;
}

// Whether t has rank 0's bytes on every rank (bit for bit).
inline bool same_on_every_rank(const Tensor& t) {
  Tensor mine = t.detach().contiguous().to(world().device()).clone();
  Tensor root = mine.clone();
  world().broadcast(root, 0);
  Tensor a = mine.to(Device::cpu()), b = root.to(Device::cpu());
  return on_every_rank(std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel() * dtype_size(a.dtype()))) == 0);
}

// A small classifier with every kind of layer the IMDb model has (embeddings, attention with
// padding, dropout, layer norm, FFN), in float64 so that sums in another order stay within 1e-12.
inline nn::ClassifierConfig small_model() {
  nn::ClassifierConfig c;
  c.vocab_size = 40;
  c.max_len = 9;
  c.dim = 8;
  c.heads = 2;
  c.layers = 1;
  c.ffn_dim = 16;
  c.classes = 2;
  c.dropout = 0.2;
  return c;
}

// A batch of `rows` reviews of the same length (9), padded from a seeded length per row.
struct SmallBatch {
  Tensor tokens, padding, labels;
  SmallBatch rows(int64_t first, int64_t count) const {
    return {tokens.narrow(0, first, count).contiguous(), padding.narrow(0, first, count).contiguous(),
            labels.narrow(0, first, count).contiguous()};
  }
};
inline SmallBatch small_batch(int64_t rows, uint64_t seed) {
  Generator gen(seed);
  const int64_t T = 9;
  std::vector<int64_t> tokens(static_cast<size_t>(rows * T));
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  std::vector<float> pad(static_cast<size_t>(rows * T));
  std::vector<double> u = uniform({rows * T + 2 * rows}, 0, 1, gen, Dtype::Float64).to_vector<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t length = 1 + int64_t(u[size_t(rows * T + r)] * T);  // 1..9 real tokens
    labels[size_t(r)] = u[size_t(rows * T + rows + r)] < 0.5 ? 0 : 1;
    for (int64_t t = 0; t < T; ++t) {
      tokens[size_t(r * T + t)] = t < length ? 2 + int64_t(u[size_t(r * T + t)] * 38) : 0;
      pad[size_t(r * T + t)] = t < length ? 0.f : 1.f;
    }
  }
  return {from_vector(tokens, {rows, T}), gt(from_vector(pad, {rows, T}), zeros({rows, T})),
          from_vector(labels, {rows})};
}

}  // namespace ember::testing
