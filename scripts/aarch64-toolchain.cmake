# A cross build of Ember for 64-bit ARM (aarch64) on a Debian x86-64 machine: Debian's cross compiler
# (g++-aarch64-linux-gnu), the arm64 libraries of Debian's multiarch (dpkg --add-architecture arm64, then
# libfmt-dev:arm64 libssl-dev:arm64 ...; the header-only ones are shared), and qemu-aarch64 (qemu-user-static)
# to run the programs, which ctest puts before each test's program (CMAKE_CROSSCOMPILING_EMULATOR).
# scripts/arm64.sh installs all of it, builds and runs the tests:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=scripts/aarch64-toolchain.cmake -DEMBER_CUDA=OFF -DEMBER_MPI=OFF
# In a cross build EMBER_NATIVE is off (the build machine is not the target): the library is compiled for the
# baseline, armv8-a, which has NEON; the GEMM's NEON kernel is picked at run time (core/cpu_info.h).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries and CMake packages from /usr/lib/aarch64-linux-gnu (multiarch), never the x86-64 ones: CMake's
# searches by the library architecture, pkg-config (which FindOpenSSL asks first) by its search path.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
find_program(EMBER_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(EMBER_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${EMBER_QEMU_AARCH64})
endif()
