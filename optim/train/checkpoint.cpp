// A training run's checkpoint: the tensors, where the run is, its settings and a checksum, read back checked.
#include "optim/train/checkpoint.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ember::train {
namespace {

constexpr const char* kChecksumKey = "checksum";

class Fnv1a {
 public:
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash_ = (hash_ ^ p[i]) * 1099511628211ull;
  }
  void add_text(const std::string& text) {  // length first: "ab" + "c" is not "a" + "bc"
    const uint64_t length = text.size();
    add(&length, sizeof length);
    add(text.data(), text.size());
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

// The integer metadata entry `key` of the file at `path`, in [min, max].
int64_t integer_entry(const nn::Metadata& meta, const std::string& path, const char* key, int64_t min, int64_t max) {
  auto it = meta.find(key);
  EMBER_CHECK(it != meta.end(), "checkpoint '{}' has no '{}' in its metadata", path, key);
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long long value = text.empty() || text[0] == ' ' ? 0 : std::strtoll(text.c_str(), &end, 10);
  EMBER_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && value >= min && value <= max,
              "checkpoint '{}': '{}' = '{}' is not an integer in [{}, {}]", path, key, text.substr(0, 40), min, max);
  return value;
}

}  // namespace

std::string checkpoint_checksum(const nn::TensorMap& tensors, const nn::Metadata& metadata) {
  Fnv1a hash;
  for (const auto& [key, value] : metadata) {
    if (key == kChecksumKey) continue;
    hash.add_text(key);
    hash.add_text(value);
  }
  for (const auto& [name, t] : tensors) {
    const Tensor cpu = t.detach().to(Device::cpu()).contiguous();
    hash.add_text(name);
    hash.add_text(std::string(dtype_name(cpu.dtype())));
    for (int64_t dim : cpu.shape()) hash.add(&dim, sizeof dim);
    hash.add(cpu.raw_data(), size_t(cpu.numel() * dtype_size(cpu.dtype())));
  }
  return fmt::format("{:016x}", hash.value());
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const RunState& state, const nn::Metadata& settings) {
  nn::TensorMap tensors = nn::with_prefix_added(model.state_dict(), "model.");
  for (auto& [name, t] : nn::with_prefix_added(optimizer.state_dict(), "optim.")) tensors.emplace(name, t);
  try {
    nn::check_all_finite(tensors, "after step " + std::to_string(state.step));
  } catch (const Error& e) {
    fail("training diverged: {}; the checkpoint before it is kept (lower the learning rate, or clip)", e.what());
  }
  nn::Metadata meta = settings;
  meta["format"] = kCheckpointFormat;
  meta["step"] = std::to_string(state.step);
  meta["total_steps"] = std::to_string(state.total_steps);
  meta["generator_offset"] = std::to_string(state.generator_offset);
  meta["epoch_loss_sum"] = fmt::format("{:a}", state.epoch_loss_sum);  // hex: reads back to the same double
  for (const auto& [name, sum] : state.epoch_sums) meta["epoch_sum." + name] = fmt::format("{:a}", sum);
  meta[kChecksumKey] = checkpoint_checksum(tensors, meta);
  nn::save_tensors(path, tensors, meta);  // atomically (nn/checkpoint.h)
}

RunState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                         const nn::Metadata& settings) {
  nn::Metadata meta;
  const nn::TensorMap tensors = nn::load_weights(path, &meta);  // a NaN or an infinity is refused, by name
  auto format = meta.find("format");
  EMBER_CHECK(format != meta.end() && format->second == kCheckpointFormat, "checkpoint '{}' has format '{}', not {} "
              "(not a checkpoint of train::Loop, or of another version)", path,
              format == meta.end() ? "(none)" : format->second.substr(0, 60), kCheckpointFormat);
  for (const auto& [key, value] : settings) {
    auto it = meta.find(key);
    EMBER_CHECK(it != meta.end() && it->second == value, "resume: {} was written with other settings: {} is {} there "
                "but {} here", path, key, it == meta.end() ? "missing" : it->second.substr(0, 60), value);
  }
  RunState state;
  state.total_steps = integer_entry(meta, path, "total_steps", 1, optim::Optimizer::max_steps);
  state.step = integer_entry(meta, path, "step", 0, state.total_steps);
  const auto offset = meta.find("generator_offset");
  EMBER_CHECK(offset != meta.end() && !offset->second.empty() &&
                  offset->second.find_first_not_of("0123456789") == std::string::npos && offset->second.size() <= 20,
              "checkpoint '{}': 'generator_offset' is missing or not an unsigned integer", path);
  errno = 0;
  state.generator_offset = std::strtoull(offset->second.c_str(), nullptr, 10);
  EMBER_CHECK(errno == 0, "checkpoint '{}': 'generator_offset' = '{}' is out of range", path, offset->second);
  const auto sum = meta.find("epoch_loss_sum");
  char* end = nullptr;
  state.epoch_loss_sum = sum == meta.end() || sum->second.empty() || sum->second[0] == ' '
                             ? NAN : std::strtod(sum->second.c_str(), &end);
  EMBER_CHECK(sum != meta.end() && end == sum->second.c_str() + sum->second.size() &&
                  std::isfinite(state.epoch_loss_sum),
              "checkpoint '{}': 'epoch_loss_sum' is missing or not a finite number", path);
  for (const auto& [key, value] : meta) {
    if (key.rfind("epoch_sum.", 0) != 0) continue;
    char* sum_end = nullptr;
    const double sum = value.empty() || value[0] == ' ' ? NAN : std::strtod(value.c_str(), &sum_end);
    EMBER_CHECK(sum_end == value.c_str() + value.size() && std::isfinite(sum), "checkpoint '{}': '{}' is not a "
                "finite number", path, key);
    state.epoch_sums[key.substr(10)] = sum;
  }
  auto recorded = meta.find(kChecksumKey);
  EMBER_CHECK(recorded != meta.end() && recorded->second == checkpoint_checksum(tensors, meta),
              "checkpoint '{}': its contents differ from the checksum it was written with: the file was changed or "
              "damaged after it was saved", path);
  for (const auto& [name, t] : tensors)
    EMBER_CHECK(name.rfind("model.", 0) == 0 || name.rfind("optim.", 0) == 0,
                "checkpoint '{}': unexpected tensor '{}' (a checkpoint holds model.* and optim.* only)", path, name);
  try {
    model.load_state_dict(nn::with_prefix_removed(tensors, "model."));
    optimizer.load_state_dict(nn::with_prefix_removed(tensors, "optim."));
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  EMBER_CHECK(optimizer.step_count() == state.step, "checkpoint '{}': the optimiser has taken {} steps but the "
              "checkpoint says {}", path, optimizer.step_count(), state.step);
  if (optimizer.step_count() > 0) {
    const std::vector<std::string> missing = optimizer.missing_state();
    EMBER_CHECK(missing.empty(), "checkpoint '{}': the optimiser state lacks 'optim.{}' (every parameter has moments "
                "after the first step)", path, missing.empty() ? "" : missing.front());
  }
  return state;
}

}  // namespace ember::train
