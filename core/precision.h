// Mixed precision, like torch.autocast: inside a MixedPrecisionGuard(Precision::BFloat16) scope the
// products of matmul, linear and attention take bfloat16 operands and sum in float32.
//
// What changes in the scope (docs/precision.md has the measured error of each):
//   linear: x and W are rounded to bfloat16 and y is bfloat16 (each entry the float32 sum
//     rounded once), as autocast's linear. So the activations between layers are bfloat16: GELU and
//     dropout run on them in bfloat16 (computed in float, each result rounded once), attention takes
//     the bfloat16 projection and returns bfloat16, the next linear reads them as they are, and adding a
//     bfloat16 output to a float32 residual gives float32. Their gradients are bfloat16 too (a tensor's
//     gradient has its dtype); the weights' gradients are float32. Half the bytes written, kept for
//     backward and read again, compared with float32 activations.
//   matmul and attention on float32 tensors: the operands are rounded to bfloat16 while the GEMM packs
//     them (no conversion pass), the products are summed in float32 and the result is float32. Attention
//     keeps its probabilities for backward in bfloat16 (core/cpu/attention.cpp).
//   On a GPU the same rules: cuBLAS with bfloat16 inputs, the element-wise kernels on the bfloat16
//     activations; a bfloat16 qkv goes into the fused attention kernels as it is (EMBER_ATTENTION=fused),
//     or is widened for the composed version and its output rounded back.
//   Every op runs its backward as its forward did, whether or not backward() itself is called inside
//     the scope (the op remembers its precision; a checkpoint's recompute runs in the forward's scope).
//   bfloat16 tensors given to matmul, linear or attention (in or out of the scope): read exactly,
//     bfloat16 results.
// What does not: softmax (also inside attention), layer norm, the loss and reductions compute in float32
// (a bfloat16 input is widened first, torch.autocast's float32 list), and the optimiser, parameters and
// AdamW's moments stay float32 (master weights).
#pragma once
#include <string_view>

namespace ember {

enum class Precision { Float32, BFloat16 };

// The calling thread's precision for products (Float32 unless a guard says otherwise).
Precision product_precision();
void set_product_precision(Precision precision);

// The CPU kernel the bfloat16 products run on: "avx512_bf16" (vdpbf16ps), or "rounded" on a CPU
// without AVX-512 BF16 or whose vdpbf16ps is slower than its float FMA, measured (the operands rounded
// to bfloat16, multiplied by the float kernel: same results up to the order of sums, float speed).
// EMBER_BF16_KERNEL names one instead. See cpu::gemm_bf16_kernel_name.
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
