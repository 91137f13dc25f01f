// Tensors <-> safetensors entries (core/safetensors.h does the file format).
#include "nn/checkpoint.h"

#include <cstring>

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
  fail("{}: tensor '{}' has dtype {}, which Ember cannot load", path, tensor, name);
}

}  // namespace

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
