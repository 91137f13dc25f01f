// Saving and loading named tensors as safetensors files (readable by other tools), atomically.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace ember::nn {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// Writes every tensor (copied to the CPU, contiguous) under its name. Atomic: a crash or error
// mid-save leaves any previous file at `path` intact.
void save_tensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

// Reads every tensor of a safetensors file as it is; errors name the file and the problem
// (truncated, malformed header, unknown dtype, offsets out of range). NaNs and infinities are
// values like any other here: an attention mask or bias holds -inf on purpose, and a diverged
// run's tensors are read to be looked at.
TensorMap load_tensors(const std::string& path, Metadata* metadata = nullptr);

// load_tensors for a model's weights or optimiser state (resume, eval, predict, a model to start
// from): a NaN or an infinity in a float tensor is an error naming the file, the tensor and the
// element (no weight file is loaded with those).
TensorMap load_weights(const std::string& path, Metadata* metadata = nullptr);

// Throws ember::Error naming `where`, the tensor and the element if a float tensor holds a NaN
// or an infinity (e.g. before saving a checkpoint of a run that diverged).
void check_all_finite(const TensorMap& tensors, const std::string& where);

// The tensors whose names start with `prefix`, with the prefix removed (e.g. "model.").
TensorMap with_prefix_removed(const TensorMap& tensors, const std::string& prefix);
TensorMap with_prefix_added(const TensorMap& tensors, const std::string& prefix);

}  // namespace ember::nn
