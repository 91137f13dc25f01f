// ZeRO stage 1 (Rajbhandari et al., 2020; as llm.c trains on several GPUs): AdamW whose moments
// are split over the ranks of a process group. The parameters are seen as one flat vector,
// padded to a multiple of the group size N; rank r keeps exp_avg and exp_avg_sq for its 1/N of
// it only. Each step (collective: every rank calls it):
//   1. reduce-scatters the flat gradient (sum, then / N): each rank gets the averaged gradient of
//      its shard (the gradients are each rank's own: nn::DataParallel with reduce_gradients off);
//   2. clips by the global norm when max_grad_norm > 0: the sums of squares of every shard,
//      all-reduced, so the norm (and the clipping) is that of the whole averaged gradient;
//   3. applies AdamW (the op adam_step_, as optim::AdamW does) to its shard;
//   4. all-gathers the updated shards into every rank's parameters.
// It sends as many bytes as a plain all-reduce (a reduce-scatter plus an all-gather) and keeps
// 2 x params / N moment values per rank instead of 2 x params.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "optim/optimizer.h"

namespace ember::optim {

class ShardedAdamW : public Optimizer {
 public:
  ShardedAdamW(std::vector<ParamGroup> groups, distributed::ProcessGroup& group, double lr, double max_grad_norm = 0,
               double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8);

  void step() override;
  // The global gradient norm of the last step, before clipping (0 before the first step).
  double last_grad_norm() const { return last_norm_; }
  int64_t shard_size() const { return shard_; }  // elements of the flat vector each rank owns

  // The same names and shapes as AdamW's state ("step", "<i>.exp_avg", "<i>.exp_avg_sq"), whole:
  // gathered from every rank by state_dict(), sliced by load_state_dict(). So a checkpoint does
  // not depend on the number of ranks, and AdamW's and ShardedAdamW's are interchangeable.
  // state_dict() is collective; load_state_dict() keeps this rank's slice of what it is given.
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  // The moments the last loaded state lacked (this rank keeps only slices, not whole buffers).
  std::vector<std::string> missing_state() const override { return missing_; }

  double beta1, beta2, eps, max_grad_norm;

 private:
  // A run of this rank's shard that lies in one parameter.
  struct Piece {
    size_t param;
    int64_t param_offset, shard_offset, length;
    double weight_decay, lr_scale;
  };
  std::vector<Tensor> params() const;
  void update_shard(double correction1, double correction2);

  distributed::ProcessGroup& group_;
  std::vector<int64_t> flat_offset_;  // per parameter, where it starts in the flat vector
  int64_t shard_ = 0;
  std::vector<Piece> pieces_;
  Tensor flat_grad_, shard_grad_, shard_param_, flat_param_, exp_avg_, exp_avg_sq_;
  double last_norm_ = 0;
  std::vector<std::string> missing_;

 protected:
  void check_state_entry(const std::string& name, const std::string& kind, const Tensor& value) const override {
    check_adam_state_entry(name, kind, value);
  }
};

}  // namespace ember::optim
