// einsum: "b h i d, b h j d -> b h i j" (einops's spacing) or "bhid,bhjd->bhij" (torch's compact form),
// lowered to the ops that already exist. An axis in one operand only and not in the output is summed
// away first; the rest are batch axes (in both operands and the output), the left's and the right's own
// output axes (M and N) and the contracted axes (in both operands, not in the output: K). Each operand is
// permuted to [batch..., M..., K...] and [batch..., K..., N...], its M, K and N axes merged into one dim
// each by reshape (a view when they are adjacent in memory), and one batched matmul does the product,
// reading a transposed operand in place. The result is split and permuted into the output's order. It
// records no node of its own: sum, permute, reshape and matmul carry the gradient.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/ops/axis_pattern.h"
#include "autograd/ops/op_support.h"

namespace ember {
namespace {

using Names = std::vector<std::string>;

bool contains(const Names& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
int64_t index_of(const Names& names, const std::string& name) {
  return int64_t(std::find(names.begin(), names.end(), name) - names.begin());
}

// A spec read against its operands: each operand's axes and the output's, one name per dim, the dims
// "..." stands for named "...0", "...1", ... aligned from the right (an operand with fewer of them takes
// the last names, as broadcasting aligns dims).
struct Spec {
  std::vector<Names> inputs;
  Names output;
  std::vector<std::pair<std::string, int64_t>> sizes;  // every axis's size (the larger where one is 1)
  int64_t size_of(const std::string& name) const {
    for (const auto& [axis, size] : sizes)
      if (axis == name) return size;
    return 1;
  }
};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// One term's axes, "..." kept as the single name "...": einsum takes names and "..." only.
Names read_term(std::string_view term, PatternStyle style, std::string_view spec) {
  Names names;
  for (const PatternDim& dim : parse_pattern_side(term, style, "einsum", spec)) {
    EMBER_CHECK(!dim.grouped && dim.axes.size() == 1 && dim.axes[0].kind != PatternAxis::Kind::Unit,
                "einsum(\"{}\"): \"{}\" has a group or a 1, which einsum does not take (only axes and \"...\"; "
                "rearrange splits and merges dims)", spec, trimmed(term));
    names.push_back(dim.axes[0].kind == PatternAxis::Kind::Ellipsis ? "..." : dim.axes[0].name);
  }
  return names;
}

// "..." replaced by the names of the dims it stands for: `count` of them, the last of `total`.
Names expand_ellipsis(const Names& names, int64_t count, int64_t total) {
  Names out;
  for (const std::string& name : names) {
    if (name != "...") {
      out.push_back(name);
      continue;
    }
    for (int64_t k = total - count; k < total; ++k) out.push_back("..." + std::to_string(k));
  }
  return out;
}

Spec read_spec(std::string_view spec, const std::vector<Tensor>& operands) {
  const size_t arrow = spec.find("->");
  EMBER_CHECK(arrow != std::string_view::npos && spec.find("->", arrow + 2) == std::string_view::npos,
              "einsum(\"{}\"): expected one \"->\" followed by the output's axes", spec);
  std::vector<std::string_view> terms;
  for (std::string_view rest = spec.substr(0, arrow);;) {
    const size_t comma = rest.find(',');
    terms.push_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  EMBER_CHECK(terms.size() == operands.size(), "einsum(\"{}\"): {} terms before \"->\" for {} operand{}", spec,
              terms.size(), operands.size(), operands.size() == 1 ? "" : "s");
  // einops's style when any term (the output's too) has a space between two axes; torch's letters otherwise.
  PatternStyle style = PatternStyle::Letters;
  std::vector<std::string_view> all_terms = terms;
  all_terms.push_back(spec.substr(arrow + 2));
  for (std::string_view term : all_terms) {
    std::string_view t = trimmed(term);
    if (std::any_of(t.begin(), t.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
      style = PatternStyle::Spaced;
  }

  Spec out;
  std::vector<Names> written;
  std::vector<int64_t> ellipsis_dims(operands.size(), 0);
  int64_t most = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    written.push_back(read_term(terms[k], style, spec));
    const bool has_ellipsis = contains(written[k], "...");
    const int64_t named = int64_t(written[k].size()) - (has_ellipsis ? 1 : 0), rank = operands[k].dim();
    EMBER_CHECK(has_ellipsis ? rank >= named : rank == named,
                "einsum(\"{}\"): operand {} has shape {} ({} dims), but its term \"{}\" names {}{} axes", spec, k,
                shape_str(operands[k].shape()), rank, trimmed(terms[k]), has_ellipsis ? "at least " : "", named);
    ellipsis_dims[k] = has_ellipsis ? rank - named : 0;
    most = std::max(most, ellipsis_dims[k]);
  }
  for (size_t k = 0; k < terms.size(); ++k) out.inputs.push_back(expand_ellipsis(written[k], ellipsis_dims[k], most));
  const Names output = read_term(spec.substr(arrow + 2), style, spec);
  const bool any_ellipsis = std::any_of(written.begin(), written.end(), [](const Names& n) { return contains(n, "..."); });
  EMBER_CHECK(!any_ellipsis || contains(output, "..."),
              "einsum(\"{}\"): the operands have \"...\" but the output does not (write \"...\" where its dims go)",
              spec);
  out.output = expand_ellipsis(output, most, most);

  // Each axis's size: the same in every operand that has it, or 1 (broadcast).
  for (size_t k = 0; k < operands.size(); ++k) {
    for (size_t d = 0; d < out.inputs[k].size(); ++d) {
      const std::string& name = out.inputs[k][d];
      const int64_t size = operands[k].shape()[d];
      auto it = std::find_if(out.sizes.begin(), out.sizes.end(), [&](const auto& s) { return s.first == name; });
      if (it == out.sizes.end()) {
        out.sizes.emplace_back(name, size);
        continue;
      }
      EMBER_CHECK(it->second == size || it->second == 1 || size == 1,
                  "einsum(\"{}\"): axis \"{}\" has size {} in operand {}, but {} in an operand before it", spec, name,
                  size, k, it->second);
      if (it->second == 1) it->second = size;
    }
  }
  for (const std::string& name : out.output)
    EMBER_CHECK(std::any_of(out.inputs.begin(), out.inputs.end(), [&](const Names& n) { return contains(n, name); }),
                "einsum(\"{}\"): axis \"{}\" of the output is in no operand", spec, name);
  return out;
}

// t (whose dims are `names`) with the axes `drop` says summed away; `names` follows.
Tensor sum_away(const Tensor& t, Names& names, const std::function<bool(const std::string&)>& drop) {
  std::vector<int64_t> dims;
  Names kept;
  for (size_t d = 0; d < names.size(); ++d) {
    if (drop(names[d])) dims.push_back(int64_t(d));
    else kept.push_back(names[d]);
  }
  if (dims.empty()) return t;
  names = kept;
  return sum(t, dims);
}

// The permutation that puts the axes `names` into the order `order` (the same set).
std::vector<int64_t> permutation(const Names& names, const Names& order) {
  std::vector<int64_t> perm;
  for (const std::string& name : order) perm.push_back(index_of(names, name));
  return perm;
}

// t, with dims `names`, permuted to `groups` one after another; a group that `merge` marks becomes one dim
// (M, K, N), the others keep a dim per axis (the batch axes: matmul broadcasts them).
Tensor arranged(const Tensor& t, const Names& names, const std::vector<Names>& groups, const std::vector<bool>& merge) {
  Names order;
  Shape shape;
  for (size_t g = 0; g < groups.size(); ++g) {
    order.insert(order.end(), groups[g].begin(), groups[g].end());
    int64_t merged = 1;
    for (const std::string& name : groups[g]) {
      const int64_t size = t.shape()[size_t(index_of(names, name))];
      if (!merge[g]) shape.push_back(size);
      merged *= size;
    }
    if (merge[g]) shape.push_back(merged);
  }
  return t.permute(permutation(names, order)).reshape(shape);
}

Tensor einsum_of_one(const Spec& spec, const Tensor& a) {
  Names names = spec.inputs[0];
  Tensor y = sum_away(a, names, [&](const std::string& name) { return !contains(spec.output, name); });
  const std::vector<int64_t> perm = permutation(names, spec.output);
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return y.permute(perm);
  return y;
}

Tensor einsum_of_two(const Spec& spec, const Tensor& a_in, const Tensor& b_in) {
  Names an = spec.inputs[0], bn = spec.inputs[1];
  const Names& out = spec.output;
  // An axis in one operand only, not in the output: summed away first.
  Tensor a = sum_away(a_in, an, [&](const std::string& name) { return !contains(bn, name) && !contains(out, name); });
  Tensor b = sum_away(b_in, bn, [&](const std::string& name) { return !contains(an, name) && !contains(out, name); });
  Names batch, m, n, k;
  for (const std::string& name : out) {
    if (contains(an, name) && contains(bn, name)) batch.push_back(name);
    else if (contains(an, name)) m.push_back(name);
    else n.push_back(name);
  }
  for (const std::string& name : an)
    if (contains(bn, name) && !contains(out, name)) k.push_back(name);
  // A contracted axis of size 1 on one side only is broadcast to the other's size (batch axes of size 1
  // are broadcast by matmul itself).
  const auto broadcast_k = [&](const Tensor& t, const Names& names) {
    Shape shape = t.shape();
    for (const std::string& name : k) shape[size_t(index_of(names, name))] = spec.size_of(name);
    return shape == t.shape() ? t : t.expand(shape);
  };
  a = broadcast_k(a, an);
  b = broadcast_k(b, bn);
  Tensor product = matmul(arranged(a, an, {batch, m, k}, {false, true, true}),
                          arranged(b, bn, {batch, k, n}, {false, true, true}));
  // [batch..., M, N] -> [batch..., m..., n...] -> the output's order.
  Shape split = Shape(product.shape().begin(), product.shape().end() - 2);
  Names names = batch;
  for (const Names* group : {&m, &n})
    for (const std::string& name : *group) {
      split.push_back(spec.size_of(name));
      names.push_back(name);
    }
  Tensor y = product.reshape(split);
  const std::vector<int64_t> perm = permutation(names, out);
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return y.permute(perm);
  return y;
}

}  // namespace

namespace {
void check_real(std::string_view spec, const Tensor& t) {
  EMBER_CHECK(is_real(t.dtype()), "einsum(\"{}\"): expected floating operands (float32, float64 or bfloat16), got {}",
              spec, dtype_name(t.dtype()));
}
}  // namespace

Tensor einsum(std::string_view spec, const Tensor& a) {
  EMBER_CHECK(a.defined(), "einsum(\"{}\"): the operand is undefined", spec);
  check_real(spec, a);
  return einsum_of_one(read_spec(spec, {a}), a);
}

Tensor einsum(std::string_view spec, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "einsum(\"{}\"): an operand is undefined", spec);
  check_same_device("einsum", {&a, &b});
  EMBER_CHECK(a.dtype() == b.dtype(), "einsum(\"{}\"): the operands' dtypes differ ({} and {})", spec,
              dtype_name(a.dtype()), dtype_name(b.dtype()));
  check_real(spec, a);
  return einsum_of_two(read_spec(spec, {a, b}), a, b);
}

}  // namespace ember
