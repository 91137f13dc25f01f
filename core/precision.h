// Mixed precision, like torch.autocast: inside a MixedPrecisionGuard(Precision::BFloat16) scope the
// products of matmul, linear and attention take bfloat16 operands and sum in float32.
//
// What changes in the scope (docs/precision.md has the measured error of each):
//   matmul, linear, attention on float32 tensors: the operands are rounded to bfloat16 while the GEMM
//     packs them (no conversion pass), the products are summed in float32 and the result is float32.
//     The one bfloat16 copy kept: attention's probabilities for its backward (core/cpu/attention.h). Their backward runs its products the same way, whether or not
//     backward() itself is called inside the scope (the op remembers its precision).
//   bfloat16 tensors given to them (in or out of the scope): read exactly, bfloat16 results.
// What does not: softmax (also inside attention), layer norm, GELU, the loss, reductions and the
// optimiser compute in float32 as before, and parameters, gradients and AdamW's moments stay float32
// (master weights): only the products' operands are rounded.
#pragma once
#include <string_view>

namespace ember {

enum class Precision { Float32, BFloat16 };

// The calling thread's precision for products (Float32 unless a guard says otherwise).
Precision product_precision();
void set_product_precision(Precision precision);

// The CPU kernel the bfloat16 products run on: "avx512_bf16" (vdpbf16ps), or "rounded" on a CPU
// without AVX-512 BF16 (the operands rounded to bfloat16, multiplied by the float kernel: same
// results up to the order of sums, float speed). See cpu::gemm_bf16_kernel_name.
const char* bf16_product_kernel();

// "fp32" or "bf16" (the trainer's --precision), and back.
std::string_view precision_name(Precision precision);
Precision parse_precision(std::string_view name);  // throws ember::Error for another name

class MixedPrecisionGuard {
 public:
  explicit MixedPrecisionGuard(Precision precision = Precision::BFloat16) : previous_(product_precision()) {
    set_product_precision(precision);
  }
  ~MixedPrecisionGuard() { set_product_precision(previous_); }
  MixedPrecisionGuard(const MixedPrecisionGuard&) = delete;
  MixedPrecisionGuard& operator=(const MixedPrecisionGuard&) = delete;

 private:
  Precision previous_;
};

}  // namespace ember
