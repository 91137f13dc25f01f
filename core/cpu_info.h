// What the CPU side of this build runs on: the instruction set and flags it was compiled for (CMake's
// EMBER_NATIVE, or the compiler's baseline in a cross build), and the kernels picked at run time. The trainer
// prints it (imdb train's "CPU: ..." line); tests/core/test_cpu_info.cpp checks it on x86-64 and on aarch64 (CI
// runs the tests of the aarch64 cross build under qemu-aarch64: scripts/arm64.sh).
#pragma once
#include <string>

namespace ember {

// The instruction set the library was compiled for: "x86-64", "aarch64" or "other".
const char* cpu_architecture();
// The flags that chose the target: EMBER_NATIVE's ("-march=native -mprefer-vector-width=512" on x86-64,
// "-mcpu=native" on aarch64), or "" for the compiler's baseline (x86-64: SSE2; aarch64: armv8-a, NEON).
const char* cpu_build_flags();
// One line, e.g. "aarch64, built for the baseline (armv8-a, NEON); float GEMM kernel neon, bfloat16 products
// rounded": the two above, the float GEMM micro-kernel chosen at run time (cpu::gemm_float_kernel_name) and the
// bfloat16 one (cpu::gemm_bf16_kernel_name).
std::string cpu_summary();

}  // namespace ember
