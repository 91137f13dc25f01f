// Element-wise arithmetic with NumPy broadcasting. The gradient of a broadcast input is the
// output gradient summed back to the input's shape (sum_to), the one place broadcasting is undone.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "autograd/ops/op_support.h"
#include "core/unary_math.h"

namespace ember {
namespace {

// The checks every device relies on, then the kernel made from the functor (core/kernels.h's binary:
// the CPU's loop or the GPU's kernel); a comparison gives a bool tensor.
template <typename F>
Tensor binary_kernel(const F& f, const Tensor& a, const Tensor& b, const char* name) {
  EMBER_CHECK(a.defined() && b.defined(), "{}: an input tensor is undefined", name);
  check_same_device(name, {&a, &b});
  EMBER_CHECK(a.dtype() == b.dtype(),
              "{}: dtypes differ ({} and {}): tensors with dims are not promoted to a common dtype (convert one "
              "with .to(); a C++ number or a 0-dim tensor takes the other operand's dtype)",
              name, dtype_name(a.dtype()), dtype_name(b.dtype()));
  EMBER_CHECK(math::is_comparison<F> || a.dtype() != Dtype::Bool,
              "{}: arithmetic on bool tensors is not defined (logical_and, logical_or, logical_xor combine masks)",
              name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, math::is_comparison<F> ? Dtype::Bool : a.dtype(), a.device());
  kernel::binary(kernel_on(a), f, shape, strided(out), strided(a, shape), strided(b, shape));
  return out;
}

PromotionOperand::Rank rank_of(const Tensor& t) {
  return t.dim() == 0 ? PromotionOperand::Rank::ZeroDim : PromotionOperand::Rank::Dims;
}

// Type promotion (core/type_promotion.h): both operands converted to the dtype the op computes in, by the
// differentiable `to`, so that a bfloat16 operand's gradient comes back rounded to bfloat16 (a mixed-precision
// layer's bfloat16 output added to a float32 residual). Two tensors with dims of different dtypes, but
// bfloat16 with float32 or float64, are left as they are: binary_kernel refuses them, naming the op.
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype()) return {a, b};
  const auto bf16_with_float = [](Dtype x, Dtype y) { return x == Dtype::BFloat16 && is_floating(y); };
  if (a.dim() > 0 && b.dim() > 0 && !bf16_with_float(a.dtype(), b.dtype()) && !bf16_with_float(b.dtype(), a.dtype()))
    return {a, b};
  const Dtype dtype = result_type({a.dtype(), rank_of(a)}, {b.dtype(), rank_of(b)});
  return {a.to(dtype), b.to(dtype)};
}

// The dtype `x op s` computes in for a C++ number s (result_type with s as a number).
Dtype with_number(const Tensor& x, Scalar s, const char* op) {
  EMBER_CHECK(x.defined(), "{}: the tensor operand is undefined", op);
  return result_type({x.dtype(), rank_of(x)}, {s.default_dtype(), PromotionOperand::Rank::Number});
}

// s as a 0-dim tensor of `dtype` on `device`; an integer kept exactly (fill_ goes through a double, exact
// up to 2^53).
Tensor number_tensor(Scalar s, Dtype dtype, Device device) {
  if (is_integer(dtype) && s.kind() != Scalar::Kind::Floating && std::abs(s.to_double()) > 9007199254740992.0) {
    Tensor t = Tensor::empty({}, Dtype::Int64);
    *t.data<int64_t>() = s.to_int64();
    return t.to(dtype).to(device);
  }
  return scalar(s.to_double(), dtype, device);
}

// A float32 tensor and a bfloat16 one on a device whose add takes the pair (kernel::add_widens: the
// CPU): the sum is float32, the bfloat16 operand widened as it is read, with no float32 copy of it
// (the residual connection of a mixed-precision model).
bool adds_widening(const Tensor& a, const Tensor& b) {
  const auto pair = [](const Tensor& x, const Tensor& y) {
    return x.dtype() == Dtype::Float32 && y.dtype() == Dtype::BFloat16 && (x.dim() > 0 || y.dim() == 0);
  };
  return a.defined() && b.defined() && (pair(a, b) || pair(b, a)) && a.device() == b.device() &&
         kernel::add_widens(kernel_on(a));
}

}  // namespace

// d(a+b) = (dy, dy); a bfloat16 operand's gradient is dy rounded to bfloat16.
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  if (adds_widening(a_in, b_in)) {
    const Tensor& wide = a_in.dtype() == Dtype::Float32 ? a_in : b_in;
    const Tensor& narrow = a_in.dtype() == Dtype::Float32 ? b_in : a_in;
    const Shape shape = broadcast_shapes(a_in.shape(), b_in.shape(), "add");
    Tensor y = Tensor::empty(shape, Dtype::Float32, wide.device());
    kernel::binary(kernel_on(wide), math::Add{}, shape, strided(y), strided(wide, shape), strided(narrow, shape));
    record("add", y, {a_in, b_in}, [sa = a_in.shape(), sb = b_in.shape(), da = a_in.dtype(), db = b_in.dtype()](
                                       const Tensor& g) -> Grads { return {sum_to(g, sa).to(da), sum_to(g, sb).to(db)}; });
    return y;
  }
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Add{}, a, b, "add");
  record("add", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(g, sb)};
  });
  return y;
}

// d(a-b) = (dy, -dy)
Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Sub{}, a, b, "sub");
  record("sub", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(-g, sb)};
  });
  return y;
}

// d(a*b) = (dy * b, dy * a): each operand is saved for the other's gradient only (a frozen b times
// an activation a: a may change after the forward, as in PyTorch).
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Mul{}, a, b, "mul");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("mul", y, {a, b}, [a = need_b ? save(a) : SavedTensor(), b = need_a ? save(b) : SavedTensor(),
                            sa = a.shape(), sb = b.shape(), need_a, need_b](const Tensor& g) -> Grads {
    return {need_a ? sum_to(g * b.get(), sa) : Tensor(), need_b ? sum_to(g * a.get(), sb) : Tensor()};
  });
  return y;
}

// d(a/b) = (dy / b, -dy * a / b^2): b is read for both gradients, a for b's only. True division, as
// torch.div: integer or bool operands divide as float32.
Tensor div(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  if (a.defined() && b.defined() && a.dtype() == b.dtype() && !is_real(a.dtype())) {
    a = a.to(Dtype::Float32);
    b = b.to(Dtype::Float32);
  }
  Tensor y = binary_kernel(math::Div{}, a, b, "div");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("div", y, {a, b}, [a = need_b ? save(a) : SavedTensor(), b = save(b), sa = a.shape(), sb = b.shape(), need_a,
                            need_b](const Tensor& g) -> Grads {
    Tensor ga = g / b.get();
    return {need_a ? sum_to(ga, sa) : Tensor(), need_b ? sum_to(-ga * a.get() / b.get(), sb) : Tensor()};
  });
  return y;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

// With a C++ number: a floating result is computed by the scalar kernels of autograd/ops/unary.cpp (one pass,
// nothing saved), an integer one (or a bool one, refused) by the binary op with the number as a 0-dim tensor.
Tensor operator+(const Tensor& a, Scalar b) {
  const Dtype dtype = with_number(a, b, "add");
  return is_real(dtype) ? add_scalar(a.to(dtype), b.to_double()) : add(a, number_tensor(b, dtype, a.device()));
}
Tensor operator-(const Tensor& a, Scalar b) {
  const Dtype dtype = with_number(a, b, "sub");
  return is_real(dtype) ? add_scalar(a.to(dtype), -b.to_double()) : sub(a, number_tensor(b, dtype, a.device()));
}
Tensor operator*(const Tensor& a, Scalar b) {
  const Dtype dtype = with_number(a, b, "mul");
  return is_real(dtype) ? mul_scalar(a.to(dtype), b.to_double()) : mul(a, number_tensor(b, dtype, a.device()));
}
Tensor operator/(const Tensor& a, Scalar b) {
  const Dtype dtype = with_number(a, b, "div");
  return is_real(dtype) ? mul_scalar(a.to(dtype), 1.0 / b.to_double()) : div(a, number_tensor(b, dtype, a.device()));
}
Tensor operator+(Scalar a, const Tensor& b) { return b + a; }
Tensor operator-(Scalar a, const Tensor& b) {
  const Dtype dtype = with_number(b, a, "sub");
  return is_real(dtype) ? add_scalar(neg(b.to(dtype)), a.to_double()) : sub(number_tensor(a, dtype, b.device()), b);
}
Tensor operator*(Scalar a, const Tensor& b) { return b * a; }
Tensor operator/(Scalar a, const Tensor& b) {
  const Dtype dtype = with_number(b, a, "div");
  return is_real(dtype) ? mul_scalar(pow(b.to(dtype), -1.0), a.to_double()) : div(number_tensor(a, dtype, b.device()), b);
}

// Comparisons: bool results, no gradient; with a number, the number as a 0-dim tensor of the dtype
// promotion picks.
#define EMBER_DEFINE_COMPARISON(name, Functor)                                         \
  Tensor name(const Tensor& a_in, const Tensor& b_in) {                               \
    auto [a, b] = promoted(a_in, b_in);                                                \
    return binary_kernel(math::Functor{}, a, b, #name);                                \
  }                                                                                    \
  Tensor name(const Tensor& a, Scalar b) {                                             \
    const Dtype dtype = with_number(a, b, #name); /* checks a first */                 \
    return name(a, number_tensor(b, dtype, a.device()));                               \
  }
EMBER_COMPARISON_OPS(EMBER_DEFINE_COMPARISON)
#undef EMBER_DEFINE_COMPARISON

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
// A number on the left: the same comparison turned around (2 < x is x > 2).
Tensor operator==(Scalar a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(Scalar a, const Tensor& b) { return ne(b, a); }
Tensor operator<(Scalar a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(Scalar a, const Tensor& b) { return ge(b, a); }
Tensor operator>(Scalar a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(Scalar a, const Tensor& b) { return le(b, a); }

// Logical ops: each operand read as bool first (nonzero is true; a bool tensor as it is), then the kernel.
namespace {
std::pair<Tensor, Tensor> as_bools(const Tensor& a, const Tensor& b, const char* op) {
  EMBER_CHECK(a.defined() && b.defined(), "{}: an input tensor is undefined", op);
  return {a.to(Dtype::Bool), b.to(Dtype::Bool)};
}
// The operators &, |, ^, ~ are for masks: other dtypes are an error (no bitwise ops on integers).
void check_masks(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    EMBER_CHECK(t->defined(), "{}: an input tensor is undefined", op);
    EMBER_CHECK(t->dtype() == Dtype::Bool,
                "{}: expected bool tensors (masks), got {}; Ember has no bitwise ops on other dtypes (logical_and, "
                "logical_or, logical_xor and logical_not take any dtype)",
                op, dtype_name(t->dtype()));
  }
}
}  // namespace

#define EMBER_DEFINE_LOGICAL(name, Functor)                    \
  Tensor name(const Tensor& a_in, const Tensor& b_in) {       \
    auto [a, b] = as_bools(a_in, b_in, #name);                 \
    return binary_kernel(math::Functor{}, a, b, #name);        \
  }
EMBER_LOGICAL_OPS(EMBER_DEFINE_LOGICAL)
#undef EMBER_DEFINE_LOGICAL

Tensor logical_not(const Tensor& x) {
  EMBER_CHECK(x.defined(), "logical_not: the input tensor is undefined");
  return binary_kernel(math::Equal{}, x.to(Dtype::Bool), scalar(0.0, Dtype::Bool, x.device()), "logical_not");
}

Tensor operator&(const Tensor& a, const Tensor& b) {
  check_masks("operator&", {&a, &b});
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_masks("operator|", {&a, &b});
  return logical_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  check_masks("operator^", {&a, &b});
  return logical_xor(a, b);
}
Tensor operator~(const Tensor& x) {
  check_masks("operator~", {&x});
  return logical_not(x);
}

}  // namespace ember
