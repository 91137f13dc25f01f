// What the CPU side of this build runs on (core/cpu_info.h). EMBER_ARCH_FLAGS_TEXT is set by CMakeLists.txt.
#include "core/cpu_info.h"

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "core/cpu/gemm.h"

#ifndef EMBER_ARCH_FLAGS_TEXT
#define EMBER_ARCH_FLAGS_TEXT ""
#endif

namespace ember {

const char* cpu_architecture() {
#if defined(__x86_64__)
  return "x86-64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "other";
#endif
}

const char* cpu_build_flags() { return EMBER_ARCH_FLAGS_TEXT; }

std::string cpu_summary() {
  const std::string_view flags = cpu_build_flags();
  std::string target = flags.empty() ? std::string("the compiler's baseline") : std::string(flags);
#if defined(__aarch64__) && defined(__ARM_NEON)
  if (flags.empty()) target += " (armv8-a, NEON)";
#elif defined(__x86_64__)
  if (flags.empty()) target += " (SSE2; the GEMM's AVX-512 and AVX2 kernels are chosen at run time)";
#endif
  return fmt::format("{}, built for {}; float GEMM kernel {}, bfloat16 products {}", cpu_architecture(), target,
                     cpu::gemm_float_kernel_name(), cpu::gemm_bf16_kernel_name());
}

}  // namespace ember
