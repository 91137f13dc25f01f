// Type promotion for element-wise ops (arithmetic and comparisons): which dtype `x * 2`, `eq(mask, 0)` or
// `scores / scalar(8.0)` computes in. PyTorch's rules for its Python numbers and 0-dim tensors, and Ember's
// one refusal: two tensors with dims and different dtypes (but bfloat16 with float32 or float64) are an
// error, where PyTorch would promote them; convert one with .to(dtype).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/dtype.h"

namespace ember {

// A C++ number as an operand (x * 2, eq(mask, 0), x / 0.5). Like a Python number in PyTorch it has a
// category, set by its C++ type: a bool, an integer or a floating number, which decides the result's
// dtype (below); its value is kept exactly (an int64 as an int64).
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Integer, Floating };

  template <typename T>
    requires std::is_arithmetic_v<T>
  Scalar(T value)  // NOLINT(google-explicit-constructor): x * 2 must read as in PyTorch
      : kind_(std::is_same_v<T, bool> ? Kind::Bool : std::is_integral_v<T> ? Kind::Integer : Kind::Floating),
        floating_(static_cast<double>(value)),
        integer_(std::is_integral_v<T> ? static_cast<int64_t>(value) : 0) {}

  Kind kind() const { return kind_; }
  double to_double() const { return floating_; }
  int64_t to_int64() const { return kind_ == Kind::Floating ? static_cast<int64_t>(floating_) : integer_; }
  // The dtype such a number has on its own in PyTorch: bool, int64, or the default float32.
  Dtype default_dtype() const {
    return kind_ == Kind::Bool ? Dtype::Bool : kind_ == Kind::Integer ? Dtype::Int64 : Dtype::Float32;
  }

 private:
  Kind kind_;
  double floating_;
  int64_t integer_;
};

// The categories, lowest first: a number or 0-dim tensor of a higher category than the tensor it meets
// changes the result's dtype; one of the same or a lower category does not.
enum class Category : uint8_t { Bool, Integer, Floating };
constexpr Category category(Dtype dtype) {
  return dtype == Dtype::Bool ? Category::Bool : is_integer(dtype) ? Category::Integer : Category::Floating;
}

// torch.promote_types: the smallest dtype that holds both (a higher category wins; within one, the wider;
// bfloat16 with float16 is float32).
constexpr Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (category(a) == Category::Integer) return a == Dtype::Int64 || b == Dtype::Int64 ? Dtype::Int64 : Dtype::Int32;
  if (a == Dtype::Float64 || b == Dtype::Float64) return Dtype::Float64;
  return Dtype::Float32;  // float32 with a 16-bit float, or bfloat16 with float16
}

// An operand of a binary op, as promotion sees it: a tensor with dims, a 0-dim tensor, or a C++ number
// (its default_dtype()).
struct PromotionOperand {
  enum class Rank : uint8_t { Dims, ZeroDim, Number };
  Dtype dtype;
  Rank rank;
};

namespace detail {
// PyTorch's combine_categories: the dtype of the higher-priority operands, unless the lower-priority
// ones are of a higher category.
constexpr Dtype combine_categories(Dtype higher, Dtype lower) {
  if (category(higher) == Category::Floating) return higher;
  if (higher == Dtype::Bool || category(lower) == Category::Floating) return promote_types(higher, lower);
  return higher;
}
}  // namespace detail

// The dtype a binary op computes in (torch.result_type): operands of each rank are promoted among
// themselves, then tensors with dims take precedence over 0-dim tensors, and those over numbers, unless
// the lower-priority side is of a higher category: float32 [N] * 2 -> float32, int64 [N] * 2.5 ->
// float32 (a floating number's default), int64 [N] * float64 0-dim -> float64, float64 [N] / float32
// 0-dim -> float64, bfloat16 [N] * float32 0-dim -> bfloat16, bool [N] == 0 -> int64. (Ember refuses two
// tensors with dims of different dtypes before asking: autograd/ops/binary.cpp.)
constexpr Dtype result_type(PromotionOperand a, PromotionOperand b) {
  bool has[3] = {false, false, false};
  Dtype of[3] = {Dtype::Bool, Dtype::Bool, Dtype::Bool};
  for (const PromotionOperand& x : {a, b}) {
    const int r = int(x.rank);
    of[r] = has[r] ? promote_types(of[r], x.dtype) : x.dtype;
    has[r] = true;
  }
  bool found = false;
  Dtype result = Dtype::Bool;
  for (PromotionOperand::Rank rank : {PromotionOperand::Rank::Number, PromotionOperand::Rank::ZeroDim,
                                      PromotionOperand::Rank::Dims}) {
    const int r = int(rank);
    if (!has[r]) continue;
    result = found ? detail::combine_categories(of[r], result) : of[r];
    found = true;
  }
  return result;
}

}  // namespace ember
