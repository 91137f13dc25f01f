// rearrange and einsum (einops's syntax, and torch.einsum's compact form): known numbers, views that share
// storage, random patterns and specs against naive loops (ranks, groups, transposes, batch, contracted and
// summed axes, broadcast size-1 axes, "..."), float64 gradient checks, zero-size dims, the seeds' multi-head
// attention written with them, and every bad pattern by its message. Device cases run on the emulated GPU in CI.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

bool shares_storage(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

// check_error (tests/helpers.h) with both messages shown on a mismatch: fn must throw an ember::Error
// whose message contains `expected`.
template <typename Fn>
void check_message(Fn&& fn, const std::string& expected) {
  try {
    fn();
    FAIL_CHECK("no error; expected: " << expected);
  } catch (const Error& e) {
    INFO("got: " << std::string(e.what()));
    INFO("expected: " << expected);
    CHECK(std::string(e.what()).find(expected) != std::string::npos);
  }
}

// The row-major flat index of `coords` (one per axis of `axes`, looked up by name) in dims made of groups.
int64_t flat_index(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& coords) {
  int64_t flat = 0;
  for (const std::vector<int>& group : groups)
    for (int axis : group) flat = flat * sizes[size_t(axis)] + coords[size_t(axis)];
  return flat;
}

// Calls fn(coords) for every assignment of coordinates to axes of these sizes.
template <typename Fn>
void for_each_coordinate(const std::vector<int64_t>& sizes, Fn&& fn) {
  std::vector<int64_t> coords(sizes.size(), 0);
  for (int64_t s : sizes)
    if (s == 0) return;
  while (true) {
    fn(coords);
    size_t i = sizes.size();
    while (i > 0 && ++coords[i - 1] == sizes[i - 1]) coords[--i] = 0;
    if (i == 0) return;
  }
}

// ---- rearrange: a random pattern of groups, written out, with the naive answer.
struct RandomRearrange {
  std::string pattern;
  std::vector<std::pair<std::string, int64_t>> sizes;  // what the pattern is given (one axis per group left out)
  Shape in_shape, out_shape;
  std::vector<int64_t> axis_sizes;
  std::vector<std::vector<int>> left, right;  // dims as groups of axis numbers
};

RandomRearrange random_rearrange(std::mt19937& rng) {
  RandomRearrange r;
  const int n = 1 + int(rng() % 5);
  for (int a = 0; a < n; ++a) r.axis_sizes.push_back(1 + int64_t(rng() % 3));
  // "..." stands for up to two axes that keep their order and stay bare dims on both sides.
  const int ellipsis_axes = rng() % 3 == 0 ? std::min(n, int(rng() % 3)) : -1;  // -1: no "..."
  std::vector<int> named;
  for (int a = std::max(ellipsis_axes, 0); a < n; ++a) named.push_back(a);
  auto side = [&](std::vector<std::vector<int>>& dims, std::string& text, bool left) {
    std::vector<int> order = named;
    std::shuffle(order.begin(), order.end(), rng);
    size_t ellipsis_at = ellipsis_axes >= 0 ? rng() % (order.size() + 1) : size_t(-1);
    size_t i = 0;
    auto add_ellipsis = [&] {
      for (int a = 0; a < ellipsis_axes; ++a) dims.push_back({a});
      text += "... ";
      ellipsis_at = size_t(-1);  // once
    };
    while (i < order.size()) {
      if (i >= ellipsis_at) add_ellipsis();
      const size_t take = std::min(order.size() - i, size_t(1 + rng() % 3));
      std::vector<int> group(order.begin() + long(i), order.begin() + long(i + take));
      const bool paren = take > 1 || rng() % 4 == 0;
      text += paren ? "(" : "";
      for (size_t g = 0; g < group.size(); ++g) {
        text += (g ? " " : "") + std::string("ax") + std::to_string(group[g]);
        if (rng() % 5 == 0 && paren) text += " 1";
      }
      text += paren ? ") " : " ";
      if (left) {  // the group's sizes: all but one given, at random
        const size_t unknown = rng() % (group.size() + 1);
        for (size_t g = 0; g < group.size(); ++g)
          if (g != unknown) r.sizes.emplace_back("ax" + std::to_string(group[g]), r.axis_sizes[size_t(group[g])]);
      }
      dims.push_back(group);
      if (rng() % 6 == 0) {
        text += rng() % 2 ? "1 " : "() ";
        dims.push_back({});  // a dim of size 1
      }
      i += take;
    }
    if (i >= ellipsis_at) add_ellipsis();
  };
  std::string left_text, right_text;
  side(r.left, left_text, true);
  side(r.right, right_text, false);
  r.pattern = left_text + "-> " + right_text;
  for (const auto* dims : {&r.left, &r.right})
    for (const std::vector<int>& group : *dims) {
      int64_t size = 1;
      for (int a : group) size *= r.axis_sizes[size_t(a)];
      (dims == &r.left ? r.in_shape : r.out_shape).push_back(size);
    }
  return r;
}

std::vector<double> naive_rearrange(const RandomRearrange& r, const std::vector<double>& in) {
  std::vector<double> out(in.size());
  for_each_coordinate(r.axis_sizes, [&](const std::vector<int64_t>& c) {
    out[size_t(flat_index(r.right, r.axis_sizes, c))] = in[size_t(flat_index(r.left, r.axis_sizes, c))];
  });
  return out;
}

// ---- einsum: a random two-operand spec, with the naive sum over every axis.
struct RandomEinsum {
  std::string compact, spaced;
  std::vector<int> a, b, out;  // axis numbers, in each term's order
  std::vector<int64_t> sizes, a_sizes, b_sizes;  // full sizes; each operand's (1 where it broadcasts)
};

RandomEinsum random_einsum(std::mt19937& rng) {
  RandomEinsum e;
  const int n = 1 + int(rng() % 6);
  for (int x = 0; x < n; ++x) {
    e.sizes.push_back(1 + int64_t(rng() % 3));
    const bool in_a = rng() % 10 < 7, in_b = rng() % 10 < 7;
    if (in_a || !in_b) e.a.push_back(x);
    if (in_b) e.b.push_back(x);
    if (rng() % 2) e.out.push_back(x);
  }
  for (auto* v : {&e.a, &e.b, &e.out}) std::shuffle(v->begin(), v->end(), rng);
  e.a_sizes = e.sizes;
  e.b_sizes = e.sizes;
  for (int x = 0; x < n; ++x) {  // an axis in both operands may be 1 in one of them: broadcast
    const bool both = std::count(e.a.begin(), e.a.end(), x) && std::count(e.b.begin(), e.b.end(), x);
    if (both && rng() % 6 == 0) (rng() % 2 ? e.a_sizes : e.b_sizes)[size_t(x)] = 1;
  }
  auto term = [](const std::vector<int>& axes, bool spaced) {
    std::string t;
    for (size_t i = 0; i < axes.size(); ++i) t += (spaced && i ? " " : "") + std::string(1, char('a' + axes[i]));
    return t;
  };
  e.compact = term(e.a, false) + "," + term(e.b, false) + "->" + term(e.out, false);
  e.spaced = term(e.a, true) + ", " + term(e.b, true) + " -> " + term(e.out, true);
  return e;
}

Shape shape_of(const std::vector<int>& axes, const std::vector<int64_t>& sizes) {
  Shape s;
  for (int x : axes) s.push_back(sizes[size_t(x)]);
  return s;
}

std::vector<double> naive_einsum(const RandomEinsum& e, const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(size_t(numel(shape_of(e.out, e.sizes))), 0.0);
  auto index = [](const std::vector<int>& axes, const std::vector<int64_t>& sizes, const std::vector<int64_t>& c) {
    int64_t flat = 0;
    for (int x : axes) flat = flat * sizes[size_t(x)] + (sizes[size_t(x)] == 1 ? 0 : c[size_t(x)]);
    return size_t(flat);
  };
  for_each_coordinate(e.sizes, [&](const std::vector<int64_t>& c) {
    out[index(e.out, e.sizes, c)] += a[index(e.a, e.a_sizes, c)] * b[index(e.b, e.b_sizes, c)];
  });
  return out;
}

}  // namespace

TEST_CASE("rearrange: known numbers, the seeds' head split and merge, 1, () and ...") {
  const Tensor x = arange(24).reshape({2, 3, 4}).to(Dtype::Float32);
  Tensor heads = rearrange(x, "b s (h d) -> b h s d", {{"h", 2}});
  CHECK(heads.shape() == Shape{2, 2, 3, 2});
  check_close(heads, x.view({2, 3, 2, 2}).permute({0, 2, 1, 3}), 0);
  check_close(rearrange(heads, "b h s d -> b s (h d)"), x, 0);
  check_close(rearrange(x, "b s (h d) -> b h s d", {{"d", 2}}), heads, 0);  // the other axis given
  check_close(rearrange(x, "b s d -> d s b"), x.permute({2, 1, 0}), 0);
  check_close(rearrange(x, "b s d -> (b s) d"), x.reshape({6, 4}), 0);
  check_close(rearrange(x, "b s d -> b (d s)"), x.transpose(1, 2).reshape({2, 12}), 0);
  CHECK(rearrange(x, "b s d -> b 1 s () d").shape() == Shape{2, 1, 3, 1, 4});
  check_close(rearrange(x.unsqueeze(1), "b 1 s d -> b s d"), x, 0);
  check_close(rearrange(x.unsqueeze(0), "() b s d -> b s (d)"), x, 0);
  check_close(rearrange(x, "b ... d -> d ... b"), x.permute({2, 1, 0}), 0);
  check_close(rearrange(x, "... (h d) -> ... h d", {{"h", 2}}), x.view({2, 3, 2, 2}), 0);
  check_close(rearrange(x, "b ... -> b (...)"), x.reshape({2, 12}), 0);
  check_close(rearrange(x, "b s d ... -> ... b s d"), x, 0);  // "..." of no dims
  check_close(rearrange(x, "(b1 b2) s d -> b1 b2 s d", {{"b1", 1}}), x.unsqueeze(0), 0);
  check_close(rearrange(scalar(3.0), " -> "), scalar(3.0), 0);
  check_close(rearrange(scalar(3.0), "-> 1 1"), full({1, 1}, 3.0), 0);
}

DEVICE_TEST_CASE("rearrange: a view whenever the strides allow, a copy otherwise") {
  const Tensor x = arange(24).reshape({2, 3, 4}).to(Dtype::Float32).to(device);
  CHECK(shares_storage(rearrange(x, "b s (h d) -> b h s d", {{"h", 2}}), x));
  CHECK(shares_storage(rearrange(x, "b s d -> (b s) d"), x));
  CHECK(shares_storage(rearrange(x, "b s d -> d (b s)"), x));  // b and s stay adjacent in memory
  CHECK(shares_storage(rearrange(x, "b ... -> ... 1 b"), x));
  CHECK(shares_storage(rearrange(x.transpose(0, 2), "d s b -> b s d"), x));
  const Tensor heads = rearrange(x, "b s (h d) -> b h s d", {{"h", 2}});
  Tensor merged = rearrange(heads, "b h s d -> b s (h d)");  // undoes the transpose: contiguous again, a view
  CHECK(shares_storage(merged, x));
  Tensor copied = rearrange(x, "b s d -> b (d s)");  // d and s are not adjacent in that order: a copy
  CHECK(!shares_storage(copied, x));
  check_close(copied.to(Device::cpu()), x.to(Device::cpu()).transpose(1, 2).reshape({2, 12}), 0);
}

DEVICE_TEST_CASE("rearrange: random patterns against a naive loop") {
  std::mt19937 rng(7);
  const int count = cuda_emulated() ? 40 : 300;  // the emulator runs each kernel on the CPU, slowly
  for (int t = 0; t < count; ++t) {
    const RandomRearrange r = random_rearrange(rng);
    INFO("pattern " << r.pattern);
    const Tensor x = random64(r.in_shape, uint64_t(t)).to(device);
    Tensor y = rearrange(x, r.pattern, r.sizes);
    REQUIRE(shape_str(y.shape()) == shape_str(r.out_shape));
    check_values(y.to(Device::cpu()), naive_rearrange(r, x.to(Device::cpu()).to_vector<double>()), 0);
    if (t % 10 == 0) {  // a strided input
      const Tensor strided = random64(Shape(r.in_shape.rbegin(), r.in_shape.rend()), uint64_t(t)).to(device);
      std::vector<int64_t> reverse;
      for (int64_t d = strided.dim() - 1; d >= 0; --d) reverse.push_back(d);
      const Tensor xt = strided.permute(reverse);
      check_values(rearrange(xt, r.pattern, r.sizes).to(Device::cpu()),
                   naive_rearrange(r, xt.to(Device::cpu()).contiguous().to_vector<double>()), 0);
    }
  }
}

DEVICE_TEST_CASE("gradcheck: rearrange") {
  check_gradient(device, [](auto& in) { return rearrange(in[0], "b s (h d) -> b h s d", {{"h", 2}}); },
                 {random64({2, 3, 4}, 1)});
  check_gradient(device, [](auto& in) { return rearrange(in[0], "b h s d -> b s (h d)") * 2.0; },
                 {random64({2, 2, 3, 2}, 2)});
  check_gradient(device, [](auto& in) { return rearrange(in[0].transpose(0, 1), "(a b) c -> c 1 (b a)", {{"a", 2}}); },
                 {random64({3, 6}, 3)});
  check_gradient(device, [](auto& in) { return rearrange(in[0], "x ... -> (...) x"); }, {random64({2, 3, 2}, 4)});
}

TEST_CASE("rearrange: zero-size dims") {
  CHECK(rearrange(zeros({0, 3, 4}), "b s (h d) -> b h s d", {{"h", 2}}).shape() == Shape{0, 2, 3, 2});
  CHECK(rearrange(zeros({2, 3, 0}), "b s (h d) -> b h s d", {{"h", 2}}).shape() == Shape{2, 2, 3, 0});
  CHECK(rearrange(zeros({2, 0, 4}), "b s d -> (s b) d").shape() == Shape{0, 4});
  CHECK(rearrange(zeros({2, 0}), "b (h d) -> b h d", {{"h", 3}, {"d", 0}}).shape() == Shape{2, 3, 0});
  Tensor x = zeros({0, 2, 3}, Dtype::Float64).requires_grad_();
  sum(rearrange(x, "a b c -> c (a b)")).backward();
  CHECK(x.grad().shape() == Shape{0, 2, 3});
}

TEST_CASE("rearrange: every bad pattern is an error naming the pattern and the axis") {
  const Tensor x = zeros({2, 3, 4});
  const auto fails = [&](const char* pattern, const std::string& message,
                         const std::vector<std::pair<std::string, int64_t>>& sizes = {}) {
    check_message([&] { rearrange(x, pattern, sizes); }, std::string("rearrange(\"") + pattern + "\"): " + message);
  };
  fails("b s d -> b s d x", "axis \"x\" is on the right but not on the left");
  fails("b s d -> b s", "axis \"d\" is on the left but not on the right");
  fails("b s s -> b s", "axis \"s\" appears twice in \"b s s \"");
  fails("b s d -> b (s s) d", "axis \"s\" appears twice in \" b (s s) d\"");
  fails("b s (h d) -> b h s d", "cannot infer axis \"h\": dim 2 of the input, (h d), has size 4, which the other axes of the group (size 3) do not divide", {{"d", 3}});
  fails("b s (h d) -> b h s d", "cannot infer the sizes of both \"h\" and \"d\" in (h d) (give all but one of them in sizes)");
  fails("b s (h d) -> b h s d", "(h d) has size 6, but dim 2 of the input has size 4", {{"h", 2}, {"d", 3}});
  fails("b s (h d) -> b h s d", "cannot infer axis \"d\" of (h d): the group's other axes have size 0", {{"h", 0}});
  fails("b s -> s b", "the left side names 2 dims, but the input has shape [2, 3, 4]");
  fails("b s d e ... -> b s d e ...", "the left side names at least 4 dims, but the input has shape [2, 3, 4]");
  fails("b s d -> b s d", "axis \"h\" is given a size but is not in the pattern", {{"h", 2}});
  fails("b s (h d) -> b h s d", "axis \"h\" is given a size twice", {{"h", 2}, {"h", 2}});
  fails("b s (h d) -> b h s d", "axis \"h\" is given the size -2", {{"h", -2}});
  fails("b s ((h d)) -> b h s d", "nested parentheses in \"b s ((h d)) \"");
  fails("b s (h d -> b h s d", "\"(\" without \")\" in \"b s (h d \"");
  fails("b s h d) -> b h s d", "\")\" without \"(\" in \"b s h d) \"");
  fails("b s (d 2) -> b s d 2", "\"2\" in \"b s (d 2) \": the only number an axis can be is 1");
  fails("b ... -> b", "\"...\" must be on both sides or on neither");
  fails("b (s ...) -> b s ...", "\"...\" cannot be in a group on the left");
  fails("b ... ... -> b ...", "\"...\" appears twice in \"b ... ... \"");
  fails("b s d", "expected one \"->\" between the input's axes and the output's");
  fails("b s d -> b -> s d", "expected one \"->\"");
  fails("b 1 d -> b d", "1 is a dim of size 1, but dim 1 of the input has size 3");
  fails("b () d -> b d", "() is a dim of size 1, but dim 1 of the input has size 3");
  fails("b s d+ -> b s d", "unexpected \"+\" in \"b s d+ \" (axes are names, 1, \"...\" or a parenthesised group of them)");
  check_error([] { rearrange(Tensor(), "a -> a"); }, "rearrange(\"a -> a\"): the input tensor is undefined");
}

TEST_CASE("einsum: known numbers in both styles") {
  const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, Dtype::Float64), b = tensor({1, 0, -1, 2, 0.5, 1}, {3, 2}, Dtype::Float64);
  check_close(einsum("ij,jk->ik", a, b), matmul(a, b), 1e-12);
  check_close(einsum("i j, j k -> i k", a, b), matmul(a, b), 1e-12);
  check_close(einsum(" ij , jk -> ik ", a, b), matmul(a, b), 1e-12);  // torch's form, spaces around the terms
  check_close(einsum("row inner, inner col -> col row", a, b), matmul(a, b).transpose(0, 1), 1e-12);
  check_values(einsum("ij->", a), {21}, 0);
  check_values(einsum("ij->j", a), {5, 7, 9}, 0);
  check_close(einsum("ij->ji", a), a.transpose(0, 1), 0);
  check_values(einsum("i,i->", tensor({1, 2, 3}, {}, Dtype::Float64), tensor({4, 5, 6}, {}, Dtype::Float64)), {32}, 0);
  check_values(einsum("i,j->ij", tensor({1, 2}, {}, Dtype::Float64), tensor({3, 4, 5}, {}, Dtype::Float64)),
               {3, 4, 5, 6, 8, 10}, 0);
  // Axes in one operand only, not in the output: summed first. sum_j a_ij * sum_k v_k.
  check_values(einsum("ij,k->i", a, tensor({1, 1, 2}, {}, Dtype::Float64)), {24, 60}, 0);
  // The seeds' attention scores, "b h i d, b h j d -> b h i j", against q k^T.
  const Tensor q = random64({2, 3, 4, 5}, 1), k = random64({2, 3, 6, 5}, 2);
  check_close(einsum("b h i d, b h j d -> b h i j", q, k), matmul(q, k.transpose(2, 3)), 1e-12);
  check_close(einsum("bhid,bhjd->bhij", q, k), matmul(q, k.transpose(2, 3)), 1e-12);
  // "...": leading dims broadcast like matmul's batch dims.
  const Tensor batch = random64({2, 3, 4, 5}, 3), one = random64({5, 2}, 4);
  check_close(einsum("...ij,jk->...ik", batch, one), matmul(batch, one), 1e-12);
  check_close(einsum("... i j, ... j k -> ... i k", batch, random64({3, 5, 2}, 5)),
              matmul(batch, random64({3, 5, 2}, 5)), 1e-12);
  check_close(einsum("b ... d -> ... b", batch), sum(batch, {-1}).permute({1, 2, 0}), 1e-12);
  // bfloat16 operands: a bfloat16 result, the float32 one (of the same values) rounded, within bfloat16's bound.
  const Tensor qb = q.to(Dtype::BFloat16), kb = k.to(Dtype::BFloat16);
  Tensor scores = einsum("b h i d, b h j d -> b h i j", qb, kb);
  CHECK(scores.dtype() == Dtype::BFloat16);
  check_close(scores, einsum("b h i d, b h j d -> b h i j", qb.to(Dtype::Float32), kb.to(Dtype::Float32)), 1e-2);
  Tensor summed = einsum("ij,k->i", a.to(Dtype::BFloat16), tensor({1, 1, 2}).to(Dtype::BFloat16));
  CHECK(summed.dtype() == Dtype::BFloat16);
  check_values(summed, {24, 60}, 0);
}

DEVICE_TEST_CASE("einsum: random specs against a naive loop, both styles") {
  std::mt19937 rng(11);
  const int count = cuda_emulated() ? 40 : 400;
  for (int t = 0; t < count; ++t) {
    const RandomEinsum e = random_einsum(rng);
    INFO("spec " << e.compact << "  (" << e.spaced << ")  sizes a " << shape_str(shape_of(e.a, e.a_sizes)) << " b "
                 << shape_str(shape_of(e.b, e.b_sizes)));
    Tensor a = random64(shape_of(e.a, e.a_sizes), uint64_t(2 * t)).to(device);
    Tensor b = random64(shape_of(e.b, e.b_sizes), uint64_t(2 * t + 1)).to(device);
    if (t % 7 == 3 && a.dim() >= 2) a = a.transpose(0, a.dim() - 1).contiguous().transpose(0, a.dim() - 1);  // strided
    const std::vector<double> expected =
        naive_einsum(e, a.to(Device::cpu()).contiguous().to_vector<double>(), b.to(Device::cpu()).to_vector<double>());
    for (const std::string& spec : {e.compact, e.spaced}) {
      Tensor y = einsum(spec, a, b);
      REQUIRE(shape_str(y.shape()) == shape_str(shape_of(e.out, e.sizes)));
      check_values(y.to(Device::cpu()), expected, 1e-12);
    }
  }
}

DEVICE_TEST_CASE("gradcheck: einsum") {
  const char* specs[] = {"b h i d, b h j d -> b h i j", "b h i j, b h j d -> b h i d", "ij,jk->ki", "i,j->ji",
                         "ijk,kj->", "abc,cd->adb", "ij,k->ik", "i j, i k -> j", "...ij,...jk->...ik"};
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 2, 3, 4}, {2, 2, 2, 4}}, {{2, 2, 3, 2}, {2, 2, 2, 4}},
                                                       {{2, 3}, {3, 4}}, {{3}, {2}}, {{2, 3, 4}, {4, 3}},
                                                       {{2, 3, 4}, {4, 2}}, {{3, 2}, {2}}, {{3, 2}, {3, 4}},
                                                       {{2, 3, 4}, {4, 2}}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    INFO(specs[i]);
    const char* spec = specs[i];
    check_gradient(device, [spec](auto& in) { return einsum(spec, in[0], in[1]); },
                   {random64(shapes[i].first, 2 * i), random64(shapes[i].second, 2 * i + 1)});
  }
  check_gradient(device, [](auto& in) { return einsum("ij,jk->ik", in[0], in[1]); },
                 {random64({2, 1}, 30), random64({3, 4}, 31)});  // j broadcast from size 1
  check_gradient(device, [](auto& in) { return einsum("b i j -> j b", in[0]); }, {random64({2, 3, 4}, 32)});
  check_gradient(device, [](auto& in) { return einsum("ij,jk->ik", in[0].transpose(0, 1), in[1]); },
                 {random64({3, 2}, 33), random64({3, 4}, 34)});
}

DEVICE_TEST_CASE("einsum and rearrange: the seeds' multi-head attention, against matmul and reshape") {
  const int64_t B = 2, T = 5, D = 8, H = 2;
  const Tensor qkv = random64({B, T, 3 * D}, 5).to(device);
  const std::vector<Tensor> parts = chunk(qkv, 3, -1);
  auto heads = [&](const Tensor& t) { return rearrange(t, "b s (h d) -> b h s d", {{"h", H}}); };
  const Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  const Tensor mask = tril(ones({T, T}, Dtype::Int64, device));
  Tensor scores = einsum("b h i d, b h j d -> b h i j", q, k) / std::sqrt(double(D / H));
  scores = masked_fill(scores, mask == 0, -INFINITY);
  Tensor out = rearrange(einsum("b h i j, b h j d -> b h i d", softmax(scores, -1), v), "b h s d -> b s (h d)");
  // The same with matmul, views and reshape.
  auto split_heads = [&](const Tensor& t) { return t.view({B, T, H, D / H}).transpose(1, 2); };
  Tensor ref_scores = matmul(split_heads(parts[0]), split_heads(parts[1]).transpose(2, 3)) * (1.0 / std::sqrt(double(D / H)));
  ref_scores = masked_fill(ref_scores, gt(arange(T).to(device).unsqueeze(0), arange(T).to(device).unsqueeze(1)), -INFINITY);
  Tensor ref = matmul(softmax(ref_scores, -1), split_heads(parts[2])).transpose(1, 2).reshape({B, T, D});
  CHECK(out.shape() == Shape{B, T, D});
  check_close(out.to(Device::cpu()), ref.to(Device::cpu()), 1e-12);
}

TEST_CASE("einsum: zero-size dims") {
  check_values(einsum("ij,jk->ik", zeros({2, 0}, Dtype::Float64), zeros({0, 3}, Dtype::Float64)), {0, 0, 0, 0, 0, 0}, 0);
  CHECK(einsum("ij,jk->ik", zeros({0, 2}), zeros({2, 3})).shape() == Shape{0, 3});
  CHECK(einsum("b i j, b j k -> b i k", zeros({0, 2, 2}), zeros({0, 2, 3})).shape() == Shape{0, 2, 3});
  check_values(einsum("ij->i", zeros({3, 0})), {0, 0, 0}, 0);
  Tensor a = zeros({2, 0}, Dtype::Float64).requires_grad_(), b = ones({0, 3}, Dtype::Float64).requires_grad_();
  sum(einsum("ij,jk->ik", a, b)).backward();
  CHECK(a.grad().shape() == Shape{2, 0});
  CHECK(b.grad().shape() == Shape{0, 3});
}

TEST_CASE("einsum: every bad spec is an error naming the spec and the axis") {
  const Tensor a = zeros({2, 3}), b = zeros({3, 4});
  const auto fails = [&](const char* spec, const std::string& message) {
    check_message([&] { einsum(spec, a, b); }, std::string("einsum(\"") + spec + "\"): " + message);
  };
  fails("ij,jk", "expected one \"->\" followed by the output's axes");
  fails("ij,jk->ik->i", "expected one \"->\"");
  fails("ij->ij", "1 terms before \"->\" for 2 operands");
  fails("ij,jk,kl->il", "3 terms before \"->\" for 2 operands");
  fails("ijk,jk->ik", "operand 0 has shape [2, 3] (2 dims), but its term \"ijk\" names 3 axes");
  fails("i j, j k l -> i l", "operand 1 has shape [3, 4] (2 dims), but its term \"j k l\" names 3 axes");
  fails("ij,kj->ik", "axis \"j\" has size 4 in operand 1, but 3 in an operand before it");
  fails("ij,jk->iz", "axis \"z\" of the output is in no operand");
  fails("ii,jk->ik", "axis \"i\" appears twice in \"ii\"");
  fails("ij,jk->ii", "axis \"i\" appears twice in \"ii\"");
  fails("(i j), j k -> i k", "\"(i j)\" has a group or a 1, which einsum does not take");
  fails("i 1, j k -> i k", "\"i 1\" has a group or a 1");
  fails("i1,jk->ik", "unexpected \"1\" in \"i1\" (axes are single letters, or \"...\")");
  fails("...j,jk->k", "the operands have \"...\" but the output does not");
  fails("ij,jk->i+k", "unexpected \"+\" in \"i+k\"");
  check_error([&] { einsum("ij,jk->ik", a, b.to(Dtype::Float64)); },
              "einsum(\"ij,jk->ik\"): the operands' dtypes differ (float32 and float64)");
  check_error([&] { einsum("ij,jk->ik", a, Tensor()); }, "einsum(\"ij,jk->ik\"): an operand is undefined");
  check_error([&] { einsum("ij->i", Tensor()); }, "einsum(\"ij->i\"): the operand is undefined");
  check_error([&] { einsum("ij,jk->ik", arange(6).reshape({2, 3}), arange(12).reshape({3, 4})); },
              "einsum(\"ij,jk->ik\"): expected floating operands (float32, float64 or bfloat16), got int64");
  check_error([&] { einsum("i->", arange(3)); }, "einsum(\"i->\"): expected floating operands");
  check_error([&] { einsum("ij->i", a, b); }, "einsum(\"ij->i\"): 1 terms before \"->\" for 2 operands");
}
