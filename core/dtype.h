// Element types a tensor can hold, their sizes and names, and dispatch from a runtime dtype to a C++ type.
#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/bfloat16.h"
#include "core/error.h"

namespace ember {

// NOTE: BFloat16 is stored, converted, printed and saved (core/bfloat16.h), and matmul, linear and
// attention compute with it (docs/precision.md); the other kernels take float32 or float64.
// Float16 is a reserved name: storage and printing know it, kernels do not yet.
enum class Dtype : uint8_t { Float32, Float64, Int32, Int64, BFloat16, Float16, Bool };

constexpr int64_t dtype_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return 4;
    case Dtype::Float64: return 8;
    case Dtype::Int32: return 4;
    case Dtype::Int64: return 8;
    case Dtype::BFloat16: return 2;
    case Dtype::Float16: return 2;
    case Dtype::Bool: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Int32: return "int32";
    case Dtype::Int64: return "int64";
    case Dtype::BFloat16: return "bfloat16";
    case Dtype::Float16: return "float16";
    case Dtype::Bool: return "bool";
  }
  return "?";
}

constexpr bool is_floating(Dtype dtype) { return dtype == Dtype::Float32 || dtype == Dtype::Float64; }
// A dtype whose values are real numbers: the floating dtypes and bfloat16 (differentiable conversions).
constexpr bool is_real(Dtype dtype) { return is_floating(dtype) || dtype == Dtype::BFloat16; }
constexpr bool is_integer(Dtype dtype) { return dtype == Dtype::Int32 || dtype == Dtype::Int64; }

// The Dtype of a C++ element type: dtype_of<float> == Dtype::Float32.
template <typename T> constexpr Dtype dtype_of();
template <> constexpr Dtype dtype_of<float>() { return Dtype::Float32; }
template <> constexpr Dtype dtype_of<double>() { return Dtype::Float64; }
template <> constexpr Dtype dtype_of<int32_t>() { return Dtype::Int32; }
template <> constexpr Dtype dtype_of<int64_t>() { return Dtype::Int64; }
template <> constexpr Dtype dtype_of<bool>() { return Dtype::Bool; }
template <> constexpr Dtype dtype_of<BFloat16>() { return Dtype::BFloat16; }

// The C++ element types a tensor can hold, those with a dtype_of (from_vector<T> takes these).
template <typename T>
concept TensorElement = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                        std::is_same_v<T, int64_t> || std::is_same_v<T, bool> || std::is_same_v<T, BFloat16>;

template <typename T> struct TypeTag { using type = T; };

// Calls fn(TypeTag<T>{}) with T the C++ type of a floating dtype; other dtypes are an error
// naming `op`. Use: dispatch_floating(x.dtype(), "exp", [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename Fn>
decltype(auto) dispatch_floating(Dtype dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case Dtype::Float32: return fn(TypeTag<float>{});
    case Dtype::Float64: return fn(TypeTag<double>{});
    default: fail("{}: expected a floating tensor (float32 or float64), got {}", op, dtype_name(dtype));
  }
}

// Like dispatch_floating, for every dtype with kernels (float32, float64, int32, int64, bool).
template <typename Fn>
decltype(auto) dispatch_all(Dtype dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case Dtype::Float32: return fn(TypeTag<float>{});
    case Dtype::Float64: return fn(TypeTag<double>{});
    case Dtype::Int32: return fn(TypeTag<int32_t>{});
    case Dtype::Int64: return fn(TypeTag<int64_t>{});
    case Dtype::Bool: return fn(TypeTag<bool>{});
    default: fail("{}: dtype {} has no kernels yet", op, dtype_name(dtype));
  }
}

// Like dispatch_floating, plus bfloat16 (stored as bfloat16, computed in float: compute_type).
template <typename Fn>
decltype(auto) dispatch_real(Dtype dtype, std::string_view op, Fn&& fn) {
  if (dtype == Dtype::BFloat16) return fn(TypeTag<BFloat16>{});
  return dispatch_floating(dtype, op, std::forward<Fn>(fn));
}

// Like dispatch_all, plus bfloat16: for what only stores or converts values (copies, fills).
template <typename Fn>
decltype(auto) dispatch_storable(Dtype dtype, std::string_view op, Fn&& fn) {
  if (dtype == Dtype::BFloat16) return fn(TypeTag<BFloat16>{});
  return dispatch_all(dtype, op, std::forward<Fn>(fn));
}

}  // namespace ember
