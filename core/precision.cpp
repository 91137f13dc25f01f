// The per-thread precision of products (core/precision.h).
#include <string_view>

#include "core/precision.h"

#include "core/cpu/gemm.h"
#include "core/error.h"

namespace ember {
namespace {
thread_local Precision current = Precision::Float32;
}

Precision product_precision() { return current; }
void set_product_precision(Precision precision) { current = precision; }

const char* bf16_product_kernel() { return cpu::gemm_bf16_kernel_name(); }

std::string_view precision_name(Precision precision) { return precision == Precision::BFloat16 ? "bf16" : "fp32"; }

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::Float32;
  if (name == "bf16") return Precision::BFloat16;
  fail("precision '{}': expected fp32 or bf16", name);
}

}  // namespace ember
