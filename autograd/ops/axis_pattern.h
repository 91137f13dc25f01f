// The axis patterns of rearrange and einsum, in einops's syntax: one side of "b s (h d) -> b h s d" read
// into its dims, each a group of axes (autograd/ops/rearrange.cpp, autograd/ops/einsum.cpp).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// One axis of a pattern: a name ("b", "head"), the unit axis "1" (a dim of size 1), or "...".
struct PatternAxis {
  enum class Kind { Named, Unit, Ellipsis };
  Kind kind = Kind::Named;
  std::string name;  // for Named
};

// One dim of a side: a bare axis, or a parenthesised group of axes ("(h d)"; "()" is a dim of size 1),
// whose sizes multiply to the dim's.
struct PatternDim {
  std::vector<PatternAxis> axes;
  bool grouped = false;
};

using PatternSide = std::vector<PatternDim>;

// How the axes of a side are written: einops's names separated by spaces, with groups ("b s (h d)"), or
// torch.einsum's compact form, one letter an axis and no groups ("bhid").
enum class PatternStyle { Spaced, Letters };

// Reads one side of `pattern` (as written by the user, for the errors). Each error names `op`, the pattern
// and the offending text: an unbalanced or nested parenthesis, a number other than 1, a character that is
// not part of a name, "..." twice, an axis named twice.
PatternSide parse_pattern_side(std::string_view side, PatternStyle style, std::string_view op,
                               std::string_view pattern);

// The names of a side's axes, in order ("..." and "1" left out).
std::vector<std::string> axis_names(const PatternSide& side);
// Where the dim holding "..." is, or side.size() if there is none.
size_t ellipsis_dim(const PatternSide& side);

}  // namespace ember
