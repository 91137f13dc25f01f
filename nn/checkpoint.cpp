// Tensors <-> safetensors entries (core/safetensors.h does the file format).
#include "nn/checkpoint.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

namespace ember::nn {
namespace {

std::string safetensors_dtype(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return "F32";
    case Dtype::Float64: return "F64";
    case Dtype::Int32: return "I32";
    case Dtype::Int64: return "I64";
    case Dtype::BFloat16: return "BF16";
    case Dtype::Float16: return "F16";
    case Dtype::Bool: return "BOOL";
  }
  return "?";
}

Dtype ember_dtype(const std::string& name, const std::string& path, const std::string& tensor) {
  if (name == "F32") return Dtype::Float32;
  if (name == "F64") return Dtype::Float64;
  if (name == "I32") return Dtype::Int32;
  if (name == "I64") return Dtype::Int64;
  if (name == "BOOL") return Dtype::Bool;
  if (name == "BF16") return Dtype::BFloat16;
  fail("{}: tensor '{}' has dtype {}, which Ember cannot load", path, tensor, name);
}

// The index of the first NaN or infinity among n values, or -1.
template <typename T>
int64_t first_non_finite(const void* data, int64_t n) {
  const T* values = static_cast<const T*>(data);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(static_cast<double>(values[i]))) return i;
  return -1;
}

// Throws naming the tensor and the element when a floating tensor holds a NaN or an infinity.
void check_finite(const Tensor& cpu, const std::string& name, const std::string& where) {
  int64_t bad = -1;
  if (cpu.dtype() == Dtype::Float32) bad = first_non_finite<float>(cpu.raw_data(), cpu.numel());
  else if (cpu.dtype() == Dtype::Float64) bad = first_non_finite<double>(cpu.raw_data(), cpu.numel());
  else if (cpu.dtype() == Dtype::BFloat16) bad = first_non_finite<BFloat16>(cpu.raw_data(), cpu.numel());
  else return;
  if (bad < 0) return;
  const double value = cpu.dtype() == Dtype::Float32   ? double(static_cast<const float*>(cpu.raw_data())[bad])
                       : cpu.dtype() == Dtype::BFloat16 ? double(static_cast<const BFloat16*>(cpu.raw_data())[bad])
                                                        : static_cast<const double*>(cpu.raw_data())[bad];
  fail("{}: tensor '{}' (shape {}) holds {} at element {}: not a usable weight", where, name, shape_str(cpu.shape()),
       std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf", bad);
}

}  // namespace

void check_all_finite(const TensorMap& tensors, const std::string& where) {
  for (const auto& [name, t] : tensors) {
    if (!is_real(t.dtype())) continue;
    check_finite(t.detach().to(Device::cpu()).contiguous(), name, where);
  }
}

void save_tensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  std::vector<safetensors::Entry> entries;
  for (const auto& [name, t] : tensors) {
    Tensor cpu = t.detach().to(Device::cpu()).contiguous();
    safetensors::Entry entry{name, safetensors_dtype(t.dtype()), cpu.shape(), {}};
    entry.data.resize(size_t(cpu.numel() * dtype_size(cpu.dtype())));
    if (!entry.data.empty()) std::memcpy(entry.data.data(), cpu.raw_data(), entry.data.size());
    entries.push_back(std::move(entry));
  }
  safetensors::save(path, entries, metadata);
}

TensorMap load_tensors(const std::string& path, Metadata* metadata) {
  safetensors::File file = safetensors::load(path);
  TensorMap out;
  for (const auto& entry : file.entries) {
    Tensor t = Tensor::empty(entry.shape, ember_dtype(entry.dtype, path, entry.name));
    EMBER_CHECK(int64_t(entry.data.size()) == t.numel() * dtype_size(t.dtype()), "{}: tensor '{}' has {} bytes for shape {}",
                path, entry.name, entry.data.size(), shape_str(entry.shape));
    if (!entry.data.empty()) std::memcpy(t.raw_data(), entry.data.data(), entry.data.size());
    out.emplace(entry.name, t);
  }
  if (metadata != nullptr) *metadata = file.metadata;
  return out;
}

TensorMap load_weights(const std::string& path, Metadata* metadata) {
  TensorMap out = load_tensors(path, metadata);
  for (const auto& [name, t] : out) check_finite(t, name, path);  // on the CPU, contiguous: as read
  return out;
}

TensorMap with_prefix_removed(const TensorMap& tensors, const std::string& prefix) {
  TensorMap out;
  for (const auto& [name, t] : tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace(name.substr(prefix.size()), t);
  return out;
}

TensorMap with_prefix_added(const TensorMap& tensors, const std::string& prefix) {
  TensorMap out;
  for (const auto& [name, t] : tensors) out.emplace(prefix + name, t);
  return out;
}

}  // namespace ember::nn
