// rearrange (einops): "b s (h d) -> b h s d" as views. The input is first viewed with one dim per axis of
// the left side (splitting a dim never needs a copy), the axes are permuted into the right side's order,
// and the right side's groups are merged by reshape: a view whenever the strides allow, else one copy.
// It records no node of its own: view, permute and reshape carry the gradient.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/ops/axis_pattern.h"
#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// The axes' sizes: the ones given, then those read from the input's dims.
class AxisSizes {
 public:
  AxisSizes(std::string_view pattern, const std::vector<std::pair<std::string, int64_t>>& given) : sizes_(given) {
    for (size_t i = 0; i < given.size(); ++i) {
      EMBER_CHECK(given[i].second >= 0, "rearrange(\"{}\"): axis \"{}\" is given the size {}", pattern, given[i].first,
                  given[i].second);
      for (size_t j = 0; j < i; ++j)
        EMBER_CHECK(given[j].first != given[i].first, "rearrange(\"{}\"): axis \"{}\" is given a size twice", pattern,
                    given[i].first);
    }
  }
  const int64_t* find(const std::string& name) const {
    for (const auto& [axis, size] : sizes_)
      if (axis == name) return &size;
    return nullptr;
  }
  int64_t at(const std::string& name) const { return *find(name); }
  void set(const std::string& name, int64_t size) { sizes_.emplace_back(name, size); }

 private:
  std::vector<std::pair<std::string, int64_t>> sizes_;
};

std::string group_text(const PatternDim& dim) {
  std::string text;
  for (const PatternAxis& axis : dim.axes) {
    if (!text.empty()) text += ' ';
    text += axis.kind == PatternAxis::Kind::Named ? axis.name : axis.kind == PatternAxis::Kind::Unit ? "1" : "...";
  }
  return dim.grouped ? "(" + text + ")" : text;
}

// Reads the sizes of the axes of left dim `dim` (a group) from the input's size there.
void infer_group(const PatternDim& dim, int64_t size, size_t index, AxisSizes& sizes, std::string_view pattern) {
  int64_t known = 1;
  std::vector<std::string> unknown;
  for (const PatternAxis& axis : dim.axes) {
    if (axis.kind != PatternAxis::Kind::Named) continue;
    if (const int64_t* s = sizes.find(axis.name)) known *= *s;
    else unknown.push_back(axis.name);
  }
  const std::string group = group_text(dim);
  if (unknown.empty()) {
    EMBER_CHECK(known == size, "rearrange(\"{}\"): {} has size {}, but dim {} of the input has size {}", pattern,
                group, known, index, size);
    return;
  }
  EMBER_CHECK(unknown.size() == 1, "rearrange(\"{}\"): cannot infer the sizes of both \"{}\" and \"{}\" in {} (give "
              "all but one of them in sizes)", pattern, unknown[0], unknown[1], group);
  EMBER_CHECK(known > 0, "rearrange(\"{}\"): cannot infer axis \"{}\" of {}: the group's other axes have size 0",
              pattern, unknown[0], group);
  EMBER_CHECK(size % known == 0,
              "rearrange(\"{}\"): cannot infer axis \"{}\": dim {} of the input, {}, has size {}, which the other "
              "axes of the group (size {}) do not divide", pattern, unknown[0], index, group, size, known);
  sizes.set(unknown[0], size / known);
}

}  // namespace

Tensor rearrange(const Tensor& x, std::string_view pattern, const std::vector<std::pair<std::string, int64_t>>& sizes) {
  EMBER_CHECK(x.defined(), "rearrange(\"{}\"): the input tensor is undefined", pattern);
  const size_t arrow = pattern.find("->");
  EMBER_CHECK(arrow != std::string_view::npos && pattern.find("->", arrow + 2) == std::string_view::npos,
              "rearrange(\"{}\"): expected one \"->\" between the input's axes and the output's", pattern);
  const PatternSide left = parse_pattern_side(pattern.substr(0, arrow), PatternStyle::Spaced, "rearrange", pattern);
  const PatternSide right = parse_pattern_side(pattern.substr(arrow + 2), PatternStyle::Spaced, "rearrange", pattern);

  // The same axes on both sides ("..." too), each once.
  const std::vector<std::string> left_names = axis_names(left), right_names = axis_names(right);
  for (const std::string& name : left_names)
    EMBER_CHECK(std::find(right_names.begin(), right_names.end(), name) != right_names.end(),
                "rearrange(\"{}\"): axis \"{}\" is on the left but not on the right (rearrange moves, splits and "
                "merges axes; each one is on both sides)", pattern, name);
  for (const std::string& name : right_names)
    EMBER_CHECK(std::find(left_names.begin(), left_names.end(), name) != left_names.end(),
                "rearrange(\"{}\"): axis \"{}\" is on the right but not on the left", pattern, name);
  const size_t left_ellipsis = ellipsis_dim(left), right_ellipsis = ellipsis_dim(right);
  EMBER_CHECK((left_ellipsis < left.size()) == (right_ellipsis < right.size()),
              "rearrange(\"{}\"): \"...\" must be on both sides or on neither", pattern);
  EMBER_CHECK(left_ellipsis == left.size() || !left[left_ellipsis].grouped,
              "rearrange(\"{}\"): \"...\" cannot be in a group on the left", pattern);
  for (const auto& [name, size] : sizes)
    EMBER_CHECK(std::find(left_names.begin(), left_names.end(), name) != left_names.end(),
                "rearrange(\"{}\"): axis \"{}\" is given a size but is not in the pattern", pattern, name);

  // The input's dims, matched to the left side's: "..." takes the dims the others leave.
  const bool has_ellipsis = left_ellipsis < left.size();
  const int64_t named_dims = int64_t(left.size()) - (has_ellipsis ? 1 : 0);
  EMBER_CHECK(has_ellipsis ? x.dim() >= named_dims : x.dim() == named_dims,
              "rearrange(\"{}\"): the left side names {}{} dims, but the input has shape {}", pattern,
              has_ellipsis ? "at least " : "", named_dims, shape_str(x.shape()));
  const int64_t ellipsis_dims = has_ellipsis ? x.dim() - named_dims : 0;

  // Every axis's size, and the input viewed with one dim per axis (the "..." dims as they are).
  AxisSizes known(pattern, sizes);
  Shape split_shape;
  std::vector<std::string> split_axes;  // the name of each dim of that view; "...k" for the ellipsis's
  int64_t input_dim = 0;
  for (size_t d = 0; d < left.size(); ++d) {
    if (d == left_ellipsis) {
      for (int64_t k = 0; k < ellipsis_dims; ++k) {
        split_shape.push_back(x.shape()[size_t(input_dim++)]);
        split_axes.push_back("..." + std::to_string(k));
      }
      continue;
    }
    const int64_t size = x.shape()[size_t(input_dim)];
    const bool unit_only = std::all_of(left[d].axes.begin(), left[d].axes.end(),
                                       [](const PatternAxis& a) { return a.kind == PatternAxis::Kind::Unit; });
    EMBER_CHECK(!unit_only || size == 1, "rearrange(\"{}\"): {} is a dim of size 1, but dim {} of the input has size {}",
                pattern, group_text(left[d]), input_dim, size);
    infer_group(left[d], size, size_t(input_dim), known, pattern);
    for (const PatternAxis& axis : left[d].axes) {
      if (axis.kind != PatternAxis::Kind::Named) continue;
      split_shape.push_back(known.at(axis.name));
      split_axes.push_back(axis.name);
    }
    ++input_dim;
  }
  Tensor split = x.reshape(split_shape);  // splitting and dropping dims of size 1: always a view

  // The right side's order of those axes, then its groups merged.
  std::vector<int64_t> order;
  Shape out_shape;
  for (size_t d = 0; d < right.size(); ++d) {
    int64_t merged = 1;
    for (const PatternAxis& axis : right[d].axes) {
      if (axis.kind == PatternAxis::Kind::Unit) continue;
      if (axis.kind == PatternAxis::Kind::Ellipsis) {
        for (int64_t k = 0; k < ellipsis_dims; ++k) {
          order.push_back(int64_t(std::find(split_axes.begin(), split_axes.end(), "..." + std::to_string(k)) -
                                  split_axes.begin()));
          merged *= split_shape[size_t(order.back())];
          if (!right[d].grouped) out_shape.push_back(split_shape[size_t(order.back())]);
        }
        continue;
      }
      order.push_back(int64_t(std::find(split_axes.begin(), split_axes.end(), axis.name) - split_axes.begin()));
      merged *= split_shape[size_t(order.back())];
    }
    const bool bare_ellipsis = d == right_ellipsis && !right[d].grouped;
    if (!bare_ellipsis) out_shape.push_back(merged);
  }
  return split.permute(order).reshape(out_shape);
}

}  // namespace ember
