// Built only with the real CUDA toolkit (not the emulator): cuBLAS is loaded on first use
// (cuda/cublas_loader.cpp), so a process that never calls it never pays for loading it.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <string>

namespace {
bool cublas_is_loaded() {
  void* handle = dlopen("libcublas.so." EMBER_CUBLAS_MAJOR, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}
}  // namespace

TEST_CASE("cuBLAS loader: not loaded at start; the first cuBLAS call loads it and reaches the real function") {
  CHECK_FALSE(cublas_is_loaded());
  // Needs no GPU: the status text comes from the library itself.
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)) == "the library was not initialized");
  CHECK(cublas_is_loaded());
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_SUCCESS)) == "success");
}
