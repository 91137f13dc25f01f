// ZeRO-1 AdamW: the flat layout and this rank's pieces of it, the four steps of an update, and
// the whole-moment state for checkpoints.
#include "optim/sharded_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/update_rules.h"

namespace ember::optim {

ShardedAdamW::ShardedAdamW(std::vector<ParamGroup> groups, distributed::ProcessGroup& group, double lr,
                           double max_grad_norm, double beta1, double beta2, double eps)
    : Optimizer(std::move(groups), lr), beta1(beta1), beta2(beta2), eps(eps), max_grad_norm(max_grad_norm),
      group_(group) {
  EMBER_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "ShardedAdamW: betas must be in [0, 1), got ({}, {})",
              beta1, beta2);
  EMBER_CHECK(max_grad_norm >= 0, "ShardedAdamW: max_grad_norm must be >= 0, got {}", max_grad_norm);
  std::vector<Tensor> all = params();
  EMBER_CHECK(!all.empty(), "ShardedAdamW: no parameters");
  const Dtype dtype = all.front().dtype();
  int64_t total = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    EMBER_CHECK(all[k].dtype() == dtype && is_floating(dtype), "ShardedAdamW: every parameter must be float32 or "
                "float64, and all the same (parameter {} is {}, parameter 0 {})", k, dtype_name(all[k].dtype()),
                dtype_name(dtype));
    EMBER_CHECK(all[k].device() == group_.device(), "ShardedAdamW: parameter {} is on {}, the {} group's tensors on {}",
                k, all[k].device().str(), group_.backend(), group_.device().str());
    flat_offset_.push_back(total);
    total += all[k].numel();
  }
  const int64_t ranks = group_.size();
  shard_ = std::max<int64_t>(1, (total + ranks - 1) / ranks);  // the last shard is padded with zeros
  // This rank's shard [first, first + shard_) of the flat vector, cut where parameters meet.
  const int64_t first = group_.rank() * shard_;
  size_t k = 0;
  for (const auto& g : groups_)
    for (size_t j = 0; j < g.params.size(); ++j, ++k) {
      const int64_t begin = std::max(first, flat_offset_[k]);
      const int64_t end = std::min(first + shard_, flat_offset_[k] + all[k].numel());
      if (begin < end) pieces_.push_back({k, begin - flat_offset_[k], begin - first, end - begin, g.weight_decay, g.lr_scale});
    }
  const Device device = group_.device();
  flat_grad_ = zeros({shard_ * ranks}, dtype, device);
  flat_param_ = zeros({shard_ * ranks}, dtype, device);
  shard_grad_ = zeros({shard_}, dtype, device);
  shard_param_ = zeros({shard_}, dtype, device);
  exp_avg_ = zeros({shard_}, dtype, device);
  exp_avg_sq_ = zeros({shard_}, dtype, device);
}

std::vector<Tensor> ShardedAdamW::params() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_)
    for (const auto& p : g.params) out.push_back(p);
  return out;
}

void ShardedAdamW::step() {
  NoGradGuard no_grad;
  count_step();
  missing_.clear();  // every parameter's shard has moments after a step
  const std::vector<Tensor> all = params();
  // 1. Every rank's gradients, flat; reduce-scattered: this rank's shard of their average.
  for (size_t k = 0; k < all.size(); ++k) {
    Tensor into = flat_grad_.narrow(0, flat_offset_[k], all[k].numel());
    if (all[k].grad().defined()) into.copy_(all[k].grad().reshape({all[k].numel()}));
    else into.zero_();  // no gradient on this rank: zeros (the update still runs, as on the other ranks)
  }
  group_.reduce_scatter(flat_grad_, shard_grad_, distributed::ReduceOp::Average);

  // 2. The global norm: every shard's sum of squares (in double), summed over the ranks.
  const double local = sum_of_squares({shard_grad_});
  Tensor squares = from_vector(std::vector<double>{local}, {1}, group_.device());
  group_.all_reduce(squares, distributed::ReduceOp::Sum);
  last_norm_ = std::sqrt(squares.to(Device::cpu()).item<double>());
  if (max_grad_norm > 0 && last_norm_ > max_grad_norm)  // as clip_grad_norm (optim/schedule.h) scales
    shard_grad_.mul_(max_grad_norm / (last_norm_ + 1e-6));

  // 3. AdamW on this rank's shard of the parameters.
  for (const Piece& piece : pieces_)
    shard_param_.narrow(0, piece.shard_offset, piece.length)
        .copy_(all[piece.param].detach().reshape({all[piece.param].numel()}).narrow(0, piece.param_offset,
                                                                                     piece.length));
  update_shard(1 - std::pow(beta1, double(steps_)), 1 - std::pow(beta2, double(steps_)));

  // 4. Every rank's updated shard, into every rank's parameters.
  group_.all_gather(shard_param_, flat_param_);
  for (size_t k = 0; k < all.size(); ++k)
    all[k].detach().view({all[k].numel()}).copy_(flat_param_.narrow(0, flat_offset_[k], all[k].numel()));
}

// The rank's shard, piece by piece (each with its parameter's weight decay), through the same op
// as optim::AdamW: one pass on the CPU, one fused launch on a GPU, for each learning-rate scale.
void ShardedAdamW::update_shard(double correction1, double correction2) {
  for (double scale : lr_scales()) {
    std::vector<Tensor> ps, gs, ms, vs;
    std::vector<double> decays;
    for (const Piece& piece : pieces_) {
      if (piece.lr_scale != scale) continue;
      ps.push_back(shard_param_.narrow(0, piece.shard_offset, piece.length));
      gs.push_back(shard_grad_.narrow(0, piece.shard_offset, piece.length));
      ms.push_back(exp_avg_.narrow(0, piece.shard_offset, piece.length));
      vs.push_back(exp_avg_sq_.narrow(0, piece.shard_offset, piece.length));
      decays.push_back(piece.weight_decay);
    }
    if (!ps.empty())
      adam_step_(ps, gs, ms, vs, decays, {lr_ * scale, beta1, beta2, eps, correction1, correction2, true});
  }
}

std::map<std::string, Tensor> ShardedAdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  out["step"] = from_vector(std::vector<int64_t>{steps_});
  if (steps_ == 0) return out;  // like AdamW: no moments before the first step
  const std::vector<Tensor> all = params();
  for (const auto& [kind, shard] : {std::pair<const char*, Tensor>{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}}) {
    Tensor whole = Tensor::empty({shard_ * group_.size()}, shard.dtype(), shard.device());
    group_.all_gather(shard, whole);
    for (size_t k = 0; k < all.size(); ++k)
      out[std::to_string(k) + "." + kind] = whole.narrow(0, flat_offset_[k], all[k].numel()).reshape(all[k].shape()).clone();
  }
  return out;
}

void ShardedAdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  for (const auto& [name, t] : state) {
    const size_t dot = name.find('.');
    const std::string kind = dot == std::string::npos ? name : name.substr(dot + 1);
    EMBER_CHECK(name == "step" || kind == "exp_avg" || kind == "exp_avg_sq",
                "ShardedAdamW state: unexpected entry '{}' (not an AdamW state)", name);
  }
  Optimizer::load_state_dict(state);  // checks names and shapes; keeps whole copies in buffers_
  NoGradGuard no_grad;
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  const std::vector<Tensor> all = params();
  for (const Piece& piece : pieces_)
    for (auto [kind, shard] : {std::pair<const char*, Tensor>{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}}) {
      auto found = buffers_.find(std::to_string(piece.param) + "." + kind);
      if (found == buffers_.end()) continue;
      shard.narrow(0, piece.shard_offset, piece.length)
          .copy_(found->second.reshape({all[piece.param].numel()}).narrow(0, piece.param_offset, piece.length));
    }
  missing_ = Optimizer::missing_state();
  buffers_.clear();  // only this rank's slice is kept
}

}  // namespace ember::optim
