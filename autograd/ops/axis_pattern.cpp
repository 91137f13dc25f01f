// Reading one side of an einops pattern: names, "1", "...", and parenthesised groups.
#include "autograd/ops/axis_pattern.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ember {
namespace {

bool starts_name(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool continues_name(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

PatternSide parse_pattern_side(std::string_view side, PatternStyle style, std::string_view op,
                               std::string_view pattern) {
  PatternSide dims;
  bool in_group = false;
  bool ellipsis = false;
  auto add = [&](PatternAxis axis) {
    if (axis.kind == PatternAxis::Kind::Ellipsis) {
      EMBER_CHECK(!ellipsis, "{}(\"{}\"): \"...\" appears twice in \"{}\"", op, pattern, side);
      ellipsis = true;
    }
    if (axis.kind == PatternAxis::Kind::Named)
      for (const std::string& name : axis_names(dims))
        EMBER_CHECK(name != axis.name, "{}(\"{}\"): axis \"{}\" appears twice in \"{}\"", op, pattern, axis.name,
                    side);
    if (in_group) dims.back().axes.push_back(std::move(axis));
    else dims.push_back(PatternDim{{std::move(axis)}, false});
  };
  for (size_t i = 0; i < side.size();) {
    const char c = side[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (side.substr(i, 3) == "...") {
      add({PatternAxis::Kind::Ellipsis, ""});
      i += 3;
    } else if (c == '(' && style == PatternStyle::Spaced) {
      EMBER_CHECK(!in_group, "{}(\"{}\"): nested parentheses in \"{}\"", op, pattern, side);
      in_group = true;
      dims.push_back(PatternDim{{}, true});
      ++i;
    } else if (c == ')' && style == PatternStyle::Spaced) {
      EMBER_CHECK(in_group, "{}(\"{}\"): \")\" without \"(\" in \"{}\"", op, pattern, side);
      in_group = false;
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) && style == PatternStyle::Spaced) {
      size_t end = i;
      while (end < side.size() && continues_name(side[end])) ++end;
      const std::string_view number = side.substr(i, end - i);
      EMBER_CHECK(number == "1", "{}(\"{}\"): \"{}\" in \"{}\": the only number an axis can be is 1 (a dim of size 1)",
                  op, pattern, number, side);
      add({PatternAxis::Kind::Unit, ""});
      i = end;
    } else if (style == PatternStyle::Letters && std::isalpha(static_cast<unsigned char>(c))) {
      add({PatternAxis::Kind::Named, std::string(1, c)});
      ++i;
    } else if (style == PatternStyle::Spaced && starts_name(c)) {
      size_t end = i;
      while (end < side.size() && continues_name(side[end])) ++end;
      add({PatternAxis::Kind::Named, std::string(side.substr(i, end - i))});
      i = end;
    } else {
      fail("{}(\"{}\"): unexpected \"{}\" in \"{}\" (axes are {})", op, pattern, c, side,
           style == PatternStyle::Letters ? "single letters, or \"...\""
                                          : "names, 1, \"...\" or a parenthesised group of them");
    }
  }
  EMBER_CHECK(!in_group, "{}(\"{}\"): \"(\" without \")\" in \"{}\"", op, pattern, side);
  return dims;
}

std::vector<std::string> axis_names(const PatternSide& side) {
  std::vector<std::string> names;
  for (const PatternDim& dim : side)
    for (const PatternAxis& axis : dim.axes)
      if (axis.kind == PatternAxis::Kind::Named) names.push_back(axis.name);
  return names;
}

size_t ellipsis_dim(const PatternSide& side) {
  for (size_t d = 0; d < side.size(); ++d)
    if (std::any_of(side[d].axes.begin(), side[d].axes.end(),
                    [](const PatternAxis& a) { return a.kind == PatternAxis::Kind::Ellipsis; }))
      return d;
  return side.size();
}

}  // namespace ember
