// What the CPU side of the build says it runs on (core/cpu_info.h): the instruction set it was compiled
// for, EMBER_NATIVE's flags, and the GEMM kernel picked at run time, which must be one this CPU runs. On
// aarch64 (CI's cross build, run under qemu-aarch64: scripts/arm64.sh) that is the NEON kernel.
#include <doctest/doctest.h>

#include <string>

#include "core/cpu/gemm.h"
#include "core/cpu_info.h"

using namespace ember;

TEST_CASE("cpu info: the architecture, the build's flags and the GEMM kernel picked at run time") {
  const std::string architecture = cpu_architecture(), flags = cpu_build_flags(), summary = cpu_summary();
  const std::string kernel = cpu::gemm_float_kernel_name();
  INFO(summary);
  CHECK(summary.rfind(architecture + ", built for ", 0) == 0);
  CHECK(summary.find("float GEMM kernel " + kernel) != std::string::npos);
  CHECK(summary.find(std::string("bfloat16 products ") + cpu::gemm_bf16_kernel_name()) != std::string::npos);
  if (flags.empty()) CHECK(summary.find("the compiler's baseline") != std::string::npos);
  else CHECK(summary.find(flags) != std::string::npos);
#if defined(__aarch64__)
  CHECK(architecture == "aarch64");
  CHECK(kernel == "neon");  // NEON is in every aarch64 CPU: picked by itself
  CHECK((flags.empty() || flags == "-mcpu=native"));
  CHECK_FALSE(cpu::set_gemm_kernel("avx2"));  // an x86 kernel is refused, and changes nothing
  CHECK(std::string(cpu::gemm_float_kernel_name()) == "neon");
#elif defined(__x86_64__)
  CHECK(architecture == "x86-64");
  CHECK((kernel == "avx512" || kernel == "avx2" || kernel == "generic"));
  CHECK((flags.empty() || flags.rfind("-march=native", 0) == 0));
  CHECK_FALSE(cpu::set_gemm_kernel("neon"));  // an ARM kernel is refused, and changes nothing
  CHECK(std::string(cpu::gemm_float_kernel_name()) == kernel);
#endif
  CHECK_FALSE(cpu::set_gemm_kernel("no_such_kernel"));
}
