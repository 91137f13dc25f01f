// Which parameters weight decay applies to, as GPT-2, minGPT and llm.c choose: the weight matrices of the
// linear layers decay; biases, LayerNorm's gains and shifts and embedding tables do not.
//   optim::AdamW adam(optim::weight_decay_groups(model, 0.01), 3e-4);
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace ember::optim {

// True for a parameter that decays: two or more dimensions, and not an embedding (its name has no "embedding").
bool decays(const std::string& name, const Tensor& parameter);

// Two groups, in this order: the parameters that decay (at weight_decay), then the others (at 0), each in the
// model's parameter order (named_parameters).
std::vector<ParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay);

}  // namespace ember::optim
