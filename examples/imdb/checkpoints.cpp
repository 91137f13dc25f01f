// The trainer's checkpoints: what they hold (model, AdamW state, step, random stream, the epoch's
// loss so far, the data's fingerprint), written atomically, read back checked in full.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/distributed/agreement.h"
#include "core/error.h"
#include "examples/imdb/digest.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"

namespace ember::imdb {

namespace {

// The checkpoint format's version (docs/reliability.md, "The checkpoint format and its version").
// The rule: a change that a reader of the current version would misread or refuse (a tensor or a
// metadata key renamed, removed or given another meaning, a new key without a default) takes
// version + 1; a key added with a default for files without it (as "truncate" .. "cuda_graph" in
// TrainConfig::from_metadata) keeps the version. This build writes kFormatVersion and reads the
// versions from kOldestReadVersion to kFormatVersion; a newer or unknown one is refused.
constexpr const char* kFormatName = "ember-imdb-checkpoint";
constexpr int kFormatVersion = 2;
constexpr int kOldestReadVersion = 2;  // v1 had no data fingerprint: a resume could not check its data

std::string format_of(int version) { return fmt::format("{}-v{}", kFormatName, version); }

// The versions this build reads, e.g. "ember-imdb-checkpoint-v2" or "...-v2 to ...-v3".
std::string formats_read() {
  return kOldestReadVersion == kFormatVersion
             ? format_of(kFormatVersion)
             : fmt::format("{} to {}", format_of(kOldestReadVersion), format_of(kFormatVersion));
}

// Refuses a format this build does not read, naming the one found and the ones it reads.
void check_format(const std::string& path, const std::string& format) {
  const std::string prefix = std::string(kFormatName) + "-v";
  std::optional<int64_t> version;
  if (format.rfind(prefix, 0) == 0) version = parse_integer(format.substr(prefix.size()), 1, 1 << 30);
  const std::string found = format.substr(0, 60);
  if (version && format != format_of(int(*version))) version.reset();  // "-v02", "-v2 ": not a name written
  EMBER_CHECK(version.has_value(), "checkpoint '{}' has format '{}', which this build does not know (it reads {}){}",
              path, found, formats_read(),
              format.rfind("ember-imdb-pretrain-checkpoint", 0) == 0
                  ? "; it is a pretraining's checkpoint (`imdb pretrain --resume` continues it; `imdb train --init` "
                    "reads its folder's encoder.safetensors)"
                  : "");
  EMBER_CHECK(*version != 1, "checkpoint '{}' was written by an older trainer ({}, without the data's fingerprint; "
              "this build reads {}): start the run again", path, found, formats_read());
  EMBER_CHECK(*version <= kFormatVersion, "checkpoint '{}' has format {}, newer than this build reads ({}): it was "
              "written by a newer trainer; use that one, or start the run again", path, found, formats_read());
  EMBER_CHECK(*version >= kOldestReadVersion, "checkpoint '{}' has format {}, older than this build reads ({}): start "
              "the run again", path, found, formats_read());
}

// The checkpoint's tensors and metadata, every number parsed in full and checked, the settings
// checked against the model's tensors: all before any model is built from them.
struct ReadCheckpoint {
  nn::TensorMap state;
  nn::Metadata meta;
  CheckpointInfo info;
};

// Checks what was read from the file at `path` (by this process, or by rank 0 and sent).
ReadCheckpoint check_read(const std::string& path, nn::TensorMap tensors, nn::Metadata metadata) {
  ReadCheckpoint read;
  read.state = std::move(tensors);
  read.meta = std::move(metadata);
  nn::Metadata& meta = read.meta;
  auto field = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    EMBER_CHECK(it != meta.end(), "checkpoint '{}' has no '{}' in its metadata (not a trainer checkpoint?)", path, key);
    return it->second;
  };
  check_format(path, field("format"));
  CheckpointInfo& info = read.info;
  try {
    info.config = TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  auto integer = [&](const char* key, int64_t min, int64_t max) {
    std::optional<int64_t> value = parse_integer(field(key), min, max);
    EMBER_CHECK(value.has_value(), "checkpoint '{}': '{}' = '{}' is not an integer in [{}, {}]", path, key,
                field(key).substr(0, 40), min, max);
    return *value;
  };
  info.total_steps = integer("total_steps", 1, optim::Optimizer::max_steps);
  info.step = integer("step", 0, optim::Optimizer::max_steps);
  EMBER_CHECK(info.step <= info.total_steps, "checkpoint '{}': step {} is past the end of the run ({} steps)", path,
              info.step, info.total_steps);
  std::optional<uint64_t> offset = parse_unsigned(field("generator_offset"));
  EMBER_CHECK(offset.has_value(), "checkpoint '{}': 'generator_offset' = '{}' is not an unsigned integer", path,
              field("generator_offset").substr(0, 40));
  info.generator_offset = *offset;
  // The loss sum is written in hex ("%a"), so that it reads back to the same double.
  const std::string& sum = field("epoch_loss_sum");
  char* end = nullptr;
  info.epoch_loss_sum = sum.empty() || std::isspace(static_cast<unsigned char>(sum[0])) ? NAN : std::strtod(sum.c_str(), &end);
  EMBER_CHECK(end == sum.c_str() + sum.size() && std::isfinite(info.epoch_loss_sum) && info.epoch_loss_sum >= 0,
              "checkpoint '{}': 'epoch_loss_sum' = '{}' is not a finite number >= 0", path, sum.substr(0, 40));
  info.data_fingerprint = field("data_fingerprint");
  EMBER_CHECK(info.data_fingerprint.size() == 64 &&
                  info.data_fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos,
              "checkpoint '{}': 'data_fingerprint' is not a SHA-256 in hex", path);
  for (const auto& [name, t] : read.state)
    EMBER_CHECK(name.rfind("model.", 0) == 0 || name.rfind("optim.", 0) == 0,
                "checkpoint '{}': unexpected tensor '{}' (a checkpoint holds model.* and optim.* only)", path, name);
  check_settings_match_tensors(info.config.model, nn::with_prefix_removed(read.state, "model."), path);
  // The optimiser's own step count must be the checkpoint's.
  auto optimizer_step = read.state.find("optim.step");
  EMBER_CHECK(optimizer_step != read.state.end() && optimizer_step->second.dtype() == Dtype::Int64 &&
                  optimizer_step->second.numel() == 1,
              "checkpoint '{}': 'optim.step' is missing or is not one int64", path);
  const int64_t optimizer_steps = optimizer_step->second.item<int64_t>();
  EMBER_CHECK(optimizer_steps == info.step, "checkpoint '{}': the optimiser has taken {} steps but the checkpoint "
              "says {}", path, optimizer_steps, info.step);
  return read;
}

ReadCheckpoint read_checkpoint(const std::string& path) {
  nn::Metadata meta;
  nn::TensorMap state = nn::load_weights(path, &meta);  // its size is bounded by the file's
  return check_read(path, std::move(state), std::move(meta));
}

// The settings it was written with must be `expected`'s.
void check_same_settings(const std::string& path, const ReadCheckpoint& read, const TrainConfig& expected) {
  const auto saved = read.info.config.to_metadata(), wanted = expected.to_metadata();
  for (const auto& [key, value] : wanted) {
    auto it = saved.find(key);
    // CUDA graphs pad each batch to a few lengths (graph_step.h), so they are a setting of the run,
    // on by default on a GPU: a run moved between the CPU and a GPU says how to continue it.
    if (key == "cuda_graph" && it != saved.end() && it->second != value)
      fail("resume: {} was written with CUDA graphs {} (cuda_graph), and this run has them {}: a run keeps the "
           "setting it began with ({})", path, it->second, value,
           it->second == "off" ? "add --cuda-graph off; on a GPU that continues a run begun on the CPU"
                               : "resume it on a GPU with --cuda-graph on: the CPU has no CUDA graphs");
    EMBER_CHECK(it != saved.end() && it->second == value, "resume: {} was written with other settings: {} is {} "
                "there but {} here", path, key, it == saved.end() ? "missing" : it->second, value);
  }
}

// Loads the model and optimiser tensors, checks that the optimiser has every moment, and last
// the checksum: what no check before can see (a setting such as heads or dropout, a weight's bits).
void load_into(const std::string& path, const ReadCheckpoint& read, nn::TransformerClassifier& model,
               optim::Optimizer& optimizer) {
  const nn::TensorMap& state = read.state;
  try {
    model.load_state_dict(nn::with_prefix_removed(state, "model."));
    optimizer.load_state_dict(nn::with_prefix_removed(state, "optim."));
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  if (optimizer.step_count() > 0) {
    std::vector<std::string> missing = optimizer.missing_state();
    EMBER_CHECK(missing.empty(), "checkpoint '{}': the optimiser state lacks 'optim.{}'{} (every parameter has "
                "moments after the first step)", path, missing.empty() ? "" : missing.front(),
                missing.size() > 1 ? fmt::format(" and {} more", missing.size() - 1) : "");
  }
  check_content_fingerprint(state, read.meta, "checkpoint '" + path + "'");
}

}  // namespace

std::string content_fingerprint(const nn::TensorMap& tensors, const nn::Metadata& metadata) {
  Digest digest(DigestKind::Sha256);
  auto add_text = [&](const std::string& text) {
    const uint64_t length = text.size();
    digest.update(&length, sizeof length);
    digest.update(text);
  };
  for (const auto& [key, value] : metadata) {
    if (key == kContentKey) continue;
    add_text(key);
    add_text(value);
  }
  for (const auto& [name, t] : tensors) {
    Tensor cpu = t.detach().to(Device::cpu()).contiguous();
    add_text(name);
    add_text(std::string(dtype_name(cpu.dtype())));
    for (int64_t dim : cpu.shape()) digest.update(&dim, sizeof dim);
    digest.update(cpu.raw_data(), size_t(cpu.numel() * dtype_size(cpu.dtype())));
  }
  return digest.hex_digest();
}

void check_content_fingerprint(const nn::TensorMap& tensors, const nn::Metadata& metadata, const std::string& path) {
  auto recorded = metadata.find(kContentKey);
  EMBER_CHECK(recorded != metadata.end(), "'{}' has no '{}' in its metadata (not written by this trainer, or by an "
              "older one)", path, kContentKey);
  EMBER_CHECK(recorded->second == content_fingerprint(tensors, metadata), "'{}': its contents differ from the "
              "checksum it was written with ({}): the file was changed or damaged after it was saved", path, kContentKey);
}

void save_checkpoint(const std::string& path, const TrainConfig& config, const CheckpointInfo& info,
                     const nn::TransformerClassifier& model, const nn::TensorMap& optimizer_state) {
  nn::TensorMap state = nn::with_prefix_added(model.state_dict(), "model.");
  for (auto& [name, t] : nn::with_prefix_added(optimizer_state, "optim.")) state.emplace(name, t);
  try {
    nn::check_all_finite(state, "after step " + std::to_string(info.step));
  } catch (const Error& e) {
    fail("training diverged: {}; the checkpoint before it is kept (lower --lr, or clip with --clip)", e.what());
  }
  nn::Metadata meta = config.to_metadata();
  meta["format"] = format_of(kFormatVersion);
  meta["step"] = std::to_string(info.step);
  meta["total_steps"] = std::to_string(info.total_steps);
  meta["generator_offset"] = std::to_string(info.generator_offset);
  meta["epoch_loss_sum"] = fmt::format("{:a}", info.epoch_loss_sum);
  meta["data_fingerprint"] = info.data_fingerprint;
  meta[kContentKey] = content_fingerprint(state, meta);
  nn::save_tensors(path, state, meta);
}

CheckpointInfo restore_checkpoint(const std::string& path, const TrainConfig& expected,
                                  nn::TransformerClassifier& model, optim::Optimizer& optimizer) {
  ReadCheckpoint read = read_checkpoint(path);
  check_same_settings(path, read, expected);
  load_into(path, read, model, optimizer);
  return read.info;
}

CheckpointInfo restore_checkpoint(const std::string& path, const TrainConfig& expected,
                                  nn::TransformerClassifier& model, optim::Optimizer& optimizer,
                                  distributed::ProcessGroup& world) {
  if (world.size() == 1) return restore_checkpoint(path, expected, model, optimizer);
  // Rank 0 reads the file; every rank checks and loads what it read (the same bytes everywhere, so
  // a check that fails fails on every rank: an agreed error, reported once by rank 0).
  nn::TensorMap state;
  nn::Metadata meta;
  distributed::on_root(world, [&] { state = nn::load_weights(path, &meta); });
  distributed::broadcast_tensors(world, state);
  meta = nlohmann::json::parse(distributed::broadcast_string(world, nlohmann::json(meta).dump())).get<nn::Metadata>();
  try {
    ReadCheckpoint read = check_read(path, std::move(state), std::move(meta));
    check_same_settings(path, read, expected);
    load_into(path, read, model, optimizer);
    return read.info;
  } catch (const Error& e) {
    throw distributed::AgreedError(e.what());
  }
}

CheckpointInfo check_checkpoint(const std::string& path) {
  ReadCheckpoint read = read_checkpoint(path);  // the sizes are those of the tensors present: building is bounded
  Generator gen(0);
  nn::TransformerClassifier model(read.info.config.model, gen);
  optim::AdamW optimizer(parameter_groups(model, read.info.config.weight_decay, read.info.config.encoder_lr_scale), read.info.config.lr);
  load_into(path, read, model, optimizer);
  return read.info;
}

}  // namespace ember::imdb
