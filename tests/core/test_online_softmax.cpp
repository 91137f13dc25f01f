// The online softmax of core/online_softmax.h, the math of the tiled CUDA attention kernels
// (cuda/attention_kernels.cu), checked on the CPU: a tiled attention forward and backward written
// here with the kernels' loop structure (query tiles of BR rows, key tiles of BC keys, each row's
// softmax split over `parts` threads, dead and causally hidden tiles skipped, the backward's dQ pass
// per query tile and dK/dV pass per key tile) and built from exactly the header's functions, against
// ember's CPU attention op (values, weights, gradients) on random inputs with padding and causal
// masks, several tile sizes, and tails (T not a multiple of the tiles).
// Bounds: float64 within 1e-12 * (1 + |expected|); float32 within 2e-6 * (1 + |expected|) for the
// outputs and weights, 4e-6 for the gradients (inputs in [-2, 2], head sizes 8 to 64).
// This checks the algorithm, not the CUDA code itself; the GPU parity tests (tests/cuda/test_cuda_ops.cpp)
// check the kernels where there is a GPU.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/online_softmax.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

struct Problem {
  int64_t B, T, D, H;
  bool causal;
  std::vector<uint8_t> pad;  // [B, T], 1 = padding; empty: no mask
  int64_t Dh() const { return D / H; }
  bool padded(int64_t b, int64_t j) const { return !pad.empty() && pad[size_t(b * T + j)] != 0; }
};

struct Tiling {
  int BR, BC, parts;  // the forward's and dQ pass's tiles; parts threads per softmax row
  int BK, BQ;         // the dK/dV pass's tiles
};

template <typename T>
struct Tiled {
  std::vector<T> out;     // [B, T, D]
  std::vector<T> lse;     // [B, H, T]
  std::vector<T> probs;   // [B, H, T, T], from lse as the probs kernel computes them
  std::vector<T> dqkv;    // [B, T, 3 D]
};

// Row t of q (which = 0), k (1) or v (2) of head h of review b.
template <typename T>
const T* row_of(const std::vector<T>& qkv, const Problem& p, int64_t b, int64_t t, int which, int64_t h) {
  return qkv.data() + (b * p.T + t) * 3 * p.D + which * p.D + h * p.Dh();
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {  // k = 0 .. n - 1 in order, like the kernels' tile_dot
  T s = T(0);
  for (int64_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// The kernels' tile-skipping rules: a key tile with no unpadded key is skipped; causal: key tiles
// past the last row of the query tile are not visited.
bool any_key_live(const Problem& p, int64_t b, int64_t first, int64_t count) {
  for (int64_t j = first; j < std::min(first + count, p.T); ++j)
    if (!p.padded(b, j)) return true;
  return false;
}
int64_t key_tiles_for(const Problem& p, int64_t q0, int64_t rows, int64_t bc) {
  const int64_t n = (p.T + bc - 1) / bc;
  if (!p.causal) return n;
  return std::min(n, (std::min(q0 + rows, p.T) - 1) / bc + 1);
}

template <typename T>
Tiled<T> tiled_attention(const std::vector<T>& qkv, const std::vector<T>& grad_out, const Problem& p, const Tiling& t) {
  const int64_t B = p.B, Tn = p.T, D = p.D, H = p.H, Dh = p.Dh();
  const T scale = T(1) / std::sqrt(T(Dh));
  Tiled<T> r;
  r.out.assign(size_t(B * Tn * D), T(0));
  r.lse.assign(size_t(B * H * Tn), T(0));
  r.probs.assign(size_t(B * H * Tn * Tn), T(0));
  r.dqkv.assign(size_t(B * Tn * 3 * D), T(0));
  std::vector<T> delta(size_t(B * H * Tn), T(0));
  const int cols_per_part = t.BC / t.parts;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      // ---- Forward: query tiles of BR rows, key tiles of BC keys.
      for (int64_t q0 = 0; q0 < Tn; q0 += t.BR) {
        const int64_t rows = std::min<int64_t>(t.BR, Tn - q0);
        std::vector<attn::SoftmaxState<T>> st(size_t(rows), attn::softmax_start<T>());
        std::vector<T> acc(size_t(rows * Dh), T(0));
        const int64_t kt_end = key_tiles_for(p, q0, t.BR, t.BC);
        for (int64_t kt = 0; kt < kt_end; ++kt) {
          const int64_t k0 = kt * t.BC;
          if (!any_key_live(p, b, k0, t.BC)) continue;
          for (int64_t i = 0; i < rows; ++i) {
            std::vector<T> s(size_t(t.BC));  // the score tile's row, -inf where masked or past T
            for (int64_t j = 0; j < t.BC; ++j) {
              const int64_t key = k0 + j;
              const bool masked = key >= Tn || attn::key_masked(p.padded(b, key), p.causal, q0 + i, key);
              s[size_t(j)] = masked ? attn::neg_inf<T>()
                                    : scale * dot(row_of(qkv, p, b, q0 + i, 0, h), row_of(qkv, p, b, key, 1, h), Dh);
            }
            // Each of `parts` threads takes a slice: partial maxes, then partial sums, combined in order.
            std::vector<T> part_max(size_t(t.parts), attn::neg_inf<T>()), part_sum(size_t(t.parts), T(0));
            for (int q = 0; q < t.parts; ++q)
              for (int c = 0; c < cols_per_part; ++c) {
                const T v = s[size_t(q * cols_per_part + c)];
                part_max[size_t(q)] = v > part_max[size_t(q)] ? v : part_max[size_t(q)];
              }
            T tile_max = part_max[0];
            for (int q = 1; q < t.parts; ++q) tile_max = part_max[size_t(q)] > tile_max ? part_max[size_t(q)] : tile_max;
            attn::SoftmaxState<T>& row_state = st[size_t(i)];
            const T alpha = attn::softmax_rescale(row_state, tile_max);
            for (int q = 0; q < t.parts; ++q)
              for (int c = 0; c < cols_per_part; ++c) {
                T& v = s[size_t(q * cols_per_part + c)];
                v = attn::softmax_weight(row_state, v);
                part_sum[size_t(q)] += v;
              }
            T total = part_sum[0];
            for (int q = 1; q < t.parts; ++q) total += part_sum[size_t(q)];
            attn::softmax_add(row_state, total);
            T* a = acc.data() + i * Dh;
            for (int64_t c = 0; c < Dh; ++c) a[c] *= alpha;
            for (int64_t j = 0; j < t.BC && k0 + j < Tn; ++j) {
              const T* v = row_of(qkv, p, b, k0 + j, 2, h);
              for (int64_t c = 0; c < Dh; ++c) a[c] += s[size_t(j)] * v[c];
            }
          }
        }
        for (int64_t i = 0; i < rows; ++i) {
          const T norm = attn::softmax_norm(st[size_t(i)]);
          for (int64_t c = 0; c < Dh; ++c) r.out[size_t((b * Tn + q0 + i) * D + h * Dh + c)] = acc[size_t(i * Dh + c)] * norm;
          r.lse[size_t(bh * Tn + q0 + i)] = attn::softmax_lse(st[size_t(i)]);
        }
      }
      // The weights, as flash_probs_kernel writes them.
      for (int64_t i = 0; i < Tn; ++i)
        for (int64_t j = 0; j < Tn; ++j) {
          const bool masked = attn::key_masked(p.padded(b, j), p.causal, i, j);
          const T s = scale * dot(row_of(qkv, p, b, i, 0, h), row_of(qkv, p, b, j, 1, h), Dh);
          r.probs[size_t((bh * Tn + i) * Tn + j)] = attn::softmax_prob(masked, s, r.lse[size_t(bh * Tn + i)]);
        }
      // ---- Backward pass 1 (flash_backward_dq_kernel): D_i = dO_i . O_i, then dQ over key tiles.
      auto dO = [&](int64_t i) { return grad_out.data() + (b * Tn + i) * D + h * Dh; };
      for (int64_t q0 = 0; q0 < Tn; q0 += t.BR) {
        const int64_t rows = std::min<int64_t>(t.BR, Tn - q0);
        for (int64_t i = 0; i < rows; ++i) {
          std::vector<T> part(size_t(t.parts), T(0));
          for (int q = 0; q < t.parts; ++q)
            for (int64_t c = q; c < Dh; c += t.parts)
              part[size_t(q)] += dO(q0 + i)[c] * r.out[size_t((b * Tn + q0 + i) * D + h * Dh + c)];
          T total = part[0];
          for (int q = 1; q < t.parts; ++q) total += part[size_t(q)];
          delta[size_t(bh * Tn + q0 + i)] = total;
        }
        std::vector<T> acc(size_t(rows * Dh), T(0));
        const int64_t kt_end = key_tiles_for(p, q0, t.BR, t.BC);
        for (int64_t kt = 0; kt < kt_end; ++kt) {
          const int64_t k0 = kt * t.BC;
          if (!any_key_live(p, b, k0, t.BC)) continue;
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < t.BC && k0 + j < Tn; ++j) {
              const int64_t qi = q0 + i, key = k0 + j;
              const bool masked = attn::key_masked(p.padded(b, key), p.causal, qi, key);
              const T s = scale * dot(row_of(qkv, p, b, qi, 0, h), row_of(qkv, p, b, key, 1, h), Dh);
              const T pr = attn::softmax_prob(masked, s, r.lse[size_t(bh * Tn + qi)]);
              const T dp = dot(dO(qi), row_of(qkv, p, b, key, 2, h), Dh);
              const T ds = attn::softmax_grad_score(pr, dp, delta[size_t(bh * Tn + qi)]);
              for (int64_t c = 0; c < Dh; ++c) acc[size_t(i * Dh + c)] += ds * row_of(qkv, p, b, key, 1, h)[c];
            }
        }
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = 0; c < Dh; ++c)
            r.dqkv[size_t((b * Tn + q0 + i) * 3 * D + h * Dh + c)] = scale * acc[size_t(i * Dh + c)];
      }
      // ---- Backward pass 2 (flash_backward_dkv_kernel): per key tile, dK and dV over query tiles.
      for (int64_t k0 = 0; k0 < Tn; k0 += t.BK) {
        const int64_t keys = std::min<int64_t>(t.BK, Tn - k0);
        std::vector<T> dk(size_t(keys * Dh), T(0)), dv(size_t(keys * Dh), T(0));
        const int64_t n_qt = any_key_live(p, b, k0, t.BK) ? (Tn + t.BQ - 1) / t.BQ : 0;
        for (int64_t qt = p.causal ? k0 / t.BQ : 0; qt < n_qt; ++qt)
          for (int64_t j = 0; j < keys; ++j)
            for (int64_t i = 0; i < t.BQ && qt * t.BQ + i < Tn; ++i) {
              const int64_t qi = qt * t.BQ + i, key = k0 + j;
              const bool masked = attn::key_masked(p.padded(b, key), p.causal, qi, key);
              const T s = scale * dot(row_of(qkv, p, b, key, 1, h), row_of(qkv, p, b, qi, 0, h), Dh);
              const T pr = attn::softmax_prob(masked, s, r.lse[size_t(bh * Tn + qi)]);
              const T dp = dot(row_of(qkv, p, b, key, 2, h), dO(qi), Dh);
              const T ds = attn::softmax_grad_score(pr, dp, delta[size_t(bh * Tn + qi)]);
              for (int64_t c = 0; c < Dh; ++c) {
                dv[size_t(j * Dh + c)] += pr * dO(qi)[c];
                dk[size_t(j * Dh + c)] += ds * row_of(qkv, p, b, qi, 0, h)[c];
              }
            }
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t c = 0; c < Dh; ++c) {
            r.dqkv[size_t((b * Tn + k0 + j) * 3 * D + D + h * Dh + c)] = scale * dk[size_t(j * Dh + c)];
            r.dqkv[size_t((b * Tn + k0 + j) * 3 * D + 2 * D + h * Dh + c)] = dv[size_t(j * Dh + c)];
          }
      }
    }
  return r;
}

// Query i of review b sees no key (every key masked): its output, weights and gradient are 0.
bool row_is_empty(const Problem& p, int64_t b, int64_t i) {
  for (int64_t j = 0; j < p.T; ++j)
    if (!attn::key_masked(p.padded(b, j), p.causal, i, j)) return false;
  return true;
}
bool has_empty_row(const Problem& p, int64_t b) {
  for (int64_t i = 0; i < p.T; ++i)
    if (row_is_empty(p, b, i)) return true;
  return false;
}

void check_near(double got, double expected, double tol, const std::string& what, size_t index) {
  INFO(what << "[" << index << "]: got " << got << ", expected " << expected);
  if (std::isnan(expected)) {
    CHECK(std::isnan(got));
  } else {
    CHECK(std::abs(got - expected) <= tol * (1 + std::abs(expected)));
  }
}

// The tiled attention on `p` against ember's CPU attention op, in the dtype of T.
template <typename T>
void check_against_cpu(const Problem& p, const Tiling& t, uint64_t seed, double tol_values, double tol_grads) {
  constexpr Dtype dtype = sizeof(T) == 8 ? Dtype::Float64 : Dtype::Float32;
  Generator gen(seed);
  Tensor qkv = uniform({p.B, p.T, 3 * p.D}, -2.0, 2.0, gen, dtype).requires_grad_();
  Tensor grad = uniform({p.B, p.T, p.D}, -1.0, 1.0, gen, dtype);
  Tensor mask;
  if (!p.pad.empty()) {
    mask = Tensor::empty({p.B, p.T}, Dtype::Bool);
    for (size_t i = 0; i < p.pad.size(); ++i) mask.data<bool>()[i] = p.pad[i] != 0;
  }
  Tensor weights;
  Tensor out = attention(qkv, p.H, mask, p.causal, &weights);
  sum(out * grad).backward();
  const std::vector<double> want_out = out.detach().to_vector<double>();
  const std::vector<double> want_probs = weights.to_vector<double>();
  const std::vector<double> want_grad = qkv.grad().to_vector<double>();

  const Tiled<T> got = tiled_attention(qkv.detach().to_vector<T>(), grad.to_vector<T>(), p, t);
  for (size_t i = 0; i < want_out.size(); ++i) check_near(double(got.out[i]), want_out[i], tol_values, "out", i);
  // Weights: a row with no unmasked key is 0 throughout, in both.
  for (size_t i = 0; i < want_probs.size(); ++i) {
    const int64_t row = int64_t(i) / p.T, b = row / (p.H * p.T), qi = row % p.T;
    if (row_is_empty(p, b, qi)) {
      INFO("probs[" << i << "] of a fully masked row is 0");
      CHECK(got.probs[i] == T(0));
      CHECK(want_probs[i] == 0.0);
    }
    check_near(double(got.probs[i]), want_probs[i], tol_values, "probs", i);
  }
  // Gradients agree everywhere, also in a review with a fully masked row (which sends none).
  const size_t per_review = size_t(p.T * 3 * p.D);
  for (int64_t b = 0; b < p.B; ++b) {
    for (size_t i = size_t(b) * per_review; i < size_t(b + 1) * per_review; ++i) {
      INFO("review " << b << (has_empty_row(p, b) ? " (with a fully masked row)" : ""));
      check_near(double(got.dqkv[i]), want_grad[i], tol_grads, "dqkv", i);
    }
  }
}

// Padding patterns for B = 4 reviews of T tokens: trailing padding of several lengths (a whole
// tile's worth at T >= 37), holes, leading padding, and (when `empty`) one review that is all padding.
std::vector<uint8_t> padding(int64_t B, int64_t T, bool empty) {
  std::vector<uint8_t> pad(size_t(B * T), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      uint8_t v = 0;
      switch (b % 4) {
        case 0: v = t >= T - T / 2; break;                       // half the review is padding
        case 1: v = (t % 5 == 3) || t >= T - 2; break;           // holes and a short tail
        case 2: v = empty ? 1 : (t == 0 || t >= T - T / 3); break;  // all padding, or leading + trailing
        default: v = 0;
      }
      pad[size_t(b * T + t)] = v;
    }
  return pad;
}

}  // namespace

TEST_CASE("online softmax: rescale, weights, merge and finish against a direct softmax") {
  Generator gen(5);
  const std::vector<double> s = uniform({23}, -6.0, 6.0, gen, Dtype::Float64).to_vector<double>();
  double m = -INFINITY, l = 0;
  for (double v : s) m = std::max(m, v);
  for (double v : s) l += std::exp(v - m);
  const double want_lse = m + std::log(l);
  for (int tile : {1, 2, 5, 23}) {
    CAPTURE(tile);
    attn::SoftmaxState<double> st = attn::softmax_start<double>();
    double acc = 0;  // a one-column "V": sum_j p_j * j
    for (size_t k0 = 0; k0 < s.size(); k0 += size_t(tile)) {
      double tile_max = -INFINITY;
      for (size_t j = k0; j < std::min(s.size(), k0 + size_t(tile)); ++j) tile_max = std::max(tile_max, s[j]);
      const double alpha = attn::softmax_rescale(st, tile_max);
      acc *= alpha;
      double sum = 0;
      for (size_t j = k0; j < std::min(s.size(), k0 + size_t(tile)); ++j) {
        const double w = attn::softmax_weight(st, s[j]);
        sum += w;
        acc += w * double(j);
      }
      attn::softmax_add(st, sum);
    }
    CHECK(attn::softmax_lse(st) == doctest::Approx(want_lse).epsilon(1e-14));
    double want_acc = 0;
    for (size_t j = 0; j < s.size(); ++j) want_acc += std::exp(s[j] - want_lse) * double(j);
    CHECK(acc * attn::softmax_norm(st) == doctest::Approx(want_acc).epsilon(1e-13));
  }
  // Two halves computed apart, then merged: the same state as one pass.
  auto pass = [&](size_t begin, size_t end, double& acc) {
    attn::SoftmaxState<double> st = attn::softmax_start<double>();
    double tile_max = -INFINITY;
    for (size_t j = begin; j < end; ++j) tile_max = std::max(tile_max, s[j]);
    attn::softmax_rescale(st, tile_max);
    double sum = 0;
    acc = 0;
    for (size_t j = begin; j < end; ++j) {
      sum += attn::softmax_weight(st, s[j]);
      acc += attn::softmax_weight(st, s[j]) * double(j);
    }
    attn::softmax_add(st, sum);
    return st;
  };
  double acc_a = 0, acc_b = 0, alpha_a = 0, alpha_b = 0;
  attn::SoftmaxState<double> a = pass(0, 9, acc_a), b = pass(9, s.size(), acc_b);
  attn::SoftmaxState<double> merged = attn::softmax_merge(a, b, alpha_a, alpha_b);
  CHECK(attn::softmax_lse(merged) == doctest::Approx(want_lse).epsilon(1e-14));
  double whole_acc = 0;
  attn::SoftmaxState<double> whole = pass(0, s.size(), whole_acc);
  CHECK((acc_a * alpha_a + acc_b * alpha_b) * attn::softmax_norm(merged) ==
        doctest::Approx(whole_acc * attn::softmax_norm(whole)).epsilon(1e-13));
  // Merging with an empty (all masked) state changes nothing; two empty states stay empty.
  attn::SoftmaxState<double> same = attn::softmax_merge(a, attn::softmax_start<double>(), alpha_a, alpha_b);
  CHECK(same.m == a.m);
  CHECK(same.l == a.l);
  CHECK(alpha_a == 1.0);
  attn::SoftmaxState<double> none =
      attn::softmax_merge(attn::softmax_start<double>(), attn::softmax_start<double>(), alpha_a, alpha_b);
  CHECK(attn::softmax_norm(none) == 0.0);  // a row that saw no key: output 0, not 0 * (1 / 0) = NaN
  CHECK(attn::softmax_lse(none) == -INFINITY);
  // All masked so far: the state does not move and nothing becomes NaN.
  attn::SoftmaxState<float> st = attn::softmax_start<float>();
  CHECK(attn::softmax_rescale(st, -INFINITY) == 1.0f);
  CHECK(attn::softmax_weight(st, -INFINITY) == 0.0f);
  CHECK(st.l == 0.0f);
  // The backward's rules: masked -> 0; no NaN from a row whose D is NaN when p = 0.
  CHECK(attn::softmax_prob(true, 3.0, 1.0) == 0.0);
  CHECK(attn::softmax_prob(false, 1.0, 1.0) == 1.0);
  CHECK(attn::softmax_prob(true, 0.0, -double(INFINITY)) == 0.0);
  CHECK(attn::softmax_grad_score(0.0, 2.0, double(NAN)) == 0.0);
  CHECK(attn::softmax_grad_score(0.5, 2.0, 1.0) == 0.5);
  CHECK(attn::key_masked(false, true, 3, 4));
  CHECK_FALSE(attn::key_masked(false, true, 4, 4));
  CHECK(attn::key_masked(true, false, 4, 0));
}

TEST_CASE("online softmax: a tiled attention built from it matches the CPU attention op, float64 to 1e-12") {
  // Tilings: the kernels' own (float64: 32 x 32; float32: 64 x 32 and 64 x 64, 4 threads per
  // row; dK/dV 64 x 32), and odd ones so that tails and partly masked tiles occur at small T.
  const std::vector<Tiling> tilings = {
      {32, 32, 8, 32, 32}, {64, 32, 4, 64, 32}, {64, 64, 4, 64, 32}, {1, 1, 1, 1, 1}, {4, 6, 3, 5, 3}, {16, 8, 2, 8, 16}};
  uint64_t seed = 100;
  for (int64_t T : {1, 5, 37, 70})
    for (int64_t H : {1, 2, 3})
      for (bool causal : {false, true})
        for (int masks = 0; masks < 3; ++masks) {  // none, padding, padding with an all-padding review
          Problem p{4, T, 24, H, causal, masks == 0 ? std::vector<uint8_t>{} : padding(4, T, masks == 2)};
          for (const Tiling& t : tilings) {
            CAPTURE(T);
            CAPTURE(H);
            CAPTURE(causal);
            CAPTURE(masks);
            CAPTURE(t.BR);
            CAPTURE(t.BC);
            CAPTURE(t.parts);
            check_against_cpu<double>(p, t, ++seed, 1e-12, 1e-12);
          }
        }
}

TEST_CASE("online softmax: the tiled attention in float32, within 2e-6 (values) and 4e-6 (gradients) of the CPU") {
  const std::vector<Tiling> tilings = {{64, 32, 4, 64, 32}, {64, 64, 4, 64, 32}, {4, 6, 3, 5, 3}};
  uint64_t seed = 900;
  for (int64_t T : {5, 70})
    for (int64_t H : {1, 4})
      for (bool causal : {false, true}) {
        Problem p{4, T, 64, H, causal, padding(4, T, false)};  // Dh = 64 and 16
        for (const Tiling& t : tilings) {
          CAPTURE(T);
          CAPTURE(H);
          CAPTURE(causal);
          CAPTURE(t.BR);
          CAPTURE(t.BC);
          check_against_cpu<float>(p, t, ++seed, 2e-6, 4e-6);
        }
      }
}
