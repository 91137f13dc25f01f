// Which parameters weight decay applies to (optim/weight_decay.h).
#include "optim/weight_decay.h"

#include <string>
#include <vector>

namespace ember::optim {

bool decays(const std::string& name, const Tensor& parameter) {
  return parameter.dim() >= 2 && name.find("embedding") == std::string::npos;
}

std::vector<ParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& [name, p] : model.named_parameters()) (decays(name, p) ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

}  // namespace ember::optim
