// Where a tensor's memory lives: the CPU or CUDA device N.
#pragma once
#include <cstdint>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // which GPU; always 0 for the CPU

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // Parses "cpu", "cuda" or "cuda:N"; anything else is an ember::Error.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu" or "cuda:N"
  // NOTE: written out, not `= default`: .cu files compile as C++17.
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

// How many CUDA devices this process can use (0 when built without CUDA or with no GPU).
int cuda_device_count();

}  // namespace ember
