// Agreement between ranks: strings as byte tensors through the group's collectives.
#include "core/distributed/agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/creation.h"
#include "core/error.h"

namespace ember::distributed {
namespace {

// Text as int64 words (8 bytes each, zero-padded): no dtype holds raw bytes, and a Bool tensor
// must hold only 0 and 1.
Tensor bytes_of(const std::string& text, int64_t size) {
  Tensor t = zeros({(size + 7) / 8}, Dtype::Int64);
  std::memcpy(t.raw_data(), text.data(), text.size());
  return t;
}

// "key=value" lines; keys and values hold no newline (settings, checked by the caller).
std::string serialize(const std::map<std::string, std::string>& settings) {
  std::string out;
  for (const auto& [key, value] : settings) out += key + "=" + value + "\n";
  return out;
}

std::map<std::string, std::string> parse(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& text) {
  EMBER_CHECK(group.device().is_cpu(), "all_gather_strings: needs a CPU group, got {}", group.backend());
  Tensor length = from_vector(std::vector<int64_t>{int64_t(text.size())});
  Tensor lengths = Tensor::empty({group.size()}, Dtype::Int64);
  group.all_gather(length, lengths);
  std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  int64_t longest = 1;
  for (int64_t s : sizes) longest = std::max(longest, s);
  const int64_t words = (longest + 7) / 8;
  Tensor all = Tensor::empty({group.size() * words}, Dtype::Int64);
  group.all_gather(bytes_of(text, longest), all);
  std::vector<std::string> out;
  const char* data = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < group.size(); ++r) out.emplace_back(data + r * words * 8, size_t(sizes[size_t(r)]));
  return out;
}

std::string broadcast_string(ProcessGroup& group, const std::string& text, int root) {
  EMBER_CHECK(group.device().is_cpu(), "broadcast_string: needs a CPU group, got {}", group.backend());
  Tensor length = from_vector(std::vector<int64_t>{int64_t(text.size())});
  group.broadcast(length, root);
  const int64_t size = length.item<int64_t>();
  Tensor bytes = bytes_of(group.rank() == root ? text : std::string(), std::max<int64_t>(size, 1));
  group.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.raw_data()), size_t(size));
}

namespace {
// The first difference between rank 0's settings and rank r's, as a message.
std::string difference(const std::map<std::string, std::string>& first, const std::map<std::string, std::string>& other,
                       int r) {
  for (const auto& [key, value] : first) {
    auto found = other.find(key);
    if (found == other.end()) return fmt::format("{} is set on rank 0 but not on rank {}", key, r);
    if (found->second != value)
      return fmt::format("{} is {} on rank 0 but {} on rank {}", key, value.empty() ? "empty" : value,
                         found->second.empty() ? "empty" : found->second, r);
  }
  for (const auto& [key, value] : other)
    if (!first.count(key)) return fmt::format("{} is set on rank {} but not on rank 0", key, r);
  return "";
}
}  // namespace

void check_same_settings(ProcessGroup& group, const std::map<std::string, std::string>& settings) {
  for (const auto& [key, value] : settings)
    EMBER_CHECK(key.find_first_of("=\n") == std::string::npos && value.find('\n') == std::string::npos,
                "check_same_settings: setting '{}' has a '=' or a newline in its name, or a newline in its value", key);
  const std::vector<std::string> all = all_gather_strings(group, serialize(settings));
  const std::map<std::string, std::string> first = parse(all[0]);
  for (int r = 1; r < group.size(); ++r)
    if (all[size_t(r)] != all[0])
      throw AgreedError("the ranks were started with different settings: " + difference(first, parse(all[size_t(r)]), r));
}

void on_root(ProcessGroup& group, const std::function<void()>& fn, int root) {
  if (group.size() == 1) {  // one process: its errors as they are (an out-of-memory stays std::bad_alloc)
    fn();
    return;
  }
  std::string error;
  if (group.rank() == root) {
    try {
      fn();
    } catch (const std::bad_alloc&) {
      error = "out of CPU memory (a C++ allocation failed)";
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "an error without a message";
    }
  }
  error = broadcast_string(group, error, root);
  if (!error.empty()) throw AgreedError(error);
}

void broadcast_tensors(ProcessGroup& group, std::map<std::string, Tensor>& tensors, int root) {
  // The index first: one line per tensor, "name dtype d0 d1 ...", then each tensor's values.
  std::string index;
  if (group.rank() == root)
    for (const auto& [name, t] : tensors) {
      EMBER_CHECK(name.find_first_of(" \n") == std::string::npos, "broadcast_tensors: name '{}' has a space or newline", name);
      // NOTE: appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) about " " + std::to_string(d).
      index += name;
      index += ' ';
      index += std::to_string(int(t.dtype()));
      for (int64_t d : t.shape()) {
        index += ' ';
        index += std::to_string(d);
      }
      index += '\n';
    }
  index = broadcast_string(group, index, root);
  std::map<std::string, Tensor> received;
  std::istringstream lines(index);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    int dtype = 0;
    fields >> name >> dtype;
    Shape shape;
    for (int64_t d; fields >> d;) shape.push_back(d);
    Tensor t = group.rank() == root ? tensors.at(name).to(Device::cpu()).contiguous().clone()
                                    : Tensor::empty(shape, Dtype(dtype));
    if (t.numel() > 0) group.broadcast(t, root);
    received[name] = t;
  }
  if (group.rank() != root) tensors = std::move(received);
}

}  // namespace ember::distributed
