// Agreement between the ranks of a group: strings sent around, the same settings on every rank
// (or one error, on every rank, naming the first that differs), work done by one rank whose error
// every rank raises, named tensors broadcast from one rank. All collective, on CPU groups.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "core/error.h"

namespace ember::distributed {

// An error every rank raised together, at the same point (a settings check, the root's error
// shared by on_root()): the job can end normally, each rank returning, rank 0 reporting it.
struct AgreedError : Error {
  using Error::Error;
};

// Every rank's `text`, in rank order.
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& text);
// Root's `text` on every rank.
std::string broadcast_string(ProcessGroup& group, const std::string& text, int root = 0);

// Throws the same AgreedError on every rank when any rank's settings differ from rank 0's,
// naming the first setting that differs and its values:
//   "the ranks were started with different settings: lr is 0.0005 on rank 0 but 0.001 on rank 1"
void check_same_settings(ProcessGroup& group, const std::map<std::string, std::string>& settings);

// Runs fn on `root` alone; when it throws, every rank throws an AgreedError with its message (on
// one process, fn's own exception, as it is).
void on_root(ProcessGroup& group, const std::function<void()>& fn, int root = 0);

// Root's named tensors on every rank (names, dtypes, shapes, values; CPU tensors): the other
// ranks' map is replaced.
void broadcast_tensors(ProcessGroup& group, std::map<std::string, Tensor>& tensors, int root = 0);

}  // namespace ember::distributed
