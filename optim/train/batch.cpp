// A batch's named arrays staged on a GPU (optim/train/batch.h).
#include "optim/train/batch.h"

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace ember::train {

const Tensor& DeviceBatch::at(const std::string& name) const {
  const auto it = arrays.find(name);
  EMBER_CHECK(it != arrays.end(), "batch: no array named '{}' (the data gives the batch's arrays)", name);
  return it->second;
}

const DeviceIds& DeviceBatch::ids_at(const std::string& name) const {
  const DeviceIds* found = find_ids(name);
  EMBER_CHECK(found != nullptr, "batch: no ids array named '{}' (an array of ids is declared in the batch's Layout)",
              name);
  return *found;
}

const DeviceIds* DeviceBatch::find_ids(const std::string& name) const {
  const auto it = ids.find(name);
  return it == ids.end() ? nullptr : &it->second;
}

namespace {

void stage_array(const std::string& name, const Tensor& host, const ArrayKind& kind, Device device, GpuStream stream,
                 DeviceBatch& into, bool with_buckets) {
  EMBER_CHECK(host.defined() && host.device().is_cpu() && host.is_contiguous(),
              "batch: array '{}' must be a contiguous tensor on the host, got {}", name,
              host.defined() ? host.device().str() : std::string("an undefined tensor"));
  const auto held = into.arrays.find(name);
  const bool same_shape = held != into.arrays.end() && held->second.shape() == host.shape();
  if (kind.same_per_shape) {
    const bool up_already = same_shape && into.same_per_shape.count(name) != 0 &&
                            (kind.id_bound == 0 || into.ids[name].bound == kind.id_bound);
    into.same_per_shape.insert(name);
    if (up_already) return;
  }
  if (kind.id_bound > 0) {
    DeviceIds& ids = into.ids[name];
    const bool buckets = kind.buckets && with_buckets;
    // A tensor of another shape is replaced (stage_ids rewrites in place only what has the ids' shape).
    if (ids.ids.defined() && (ids.ids.shape() != host.shape() || ids.buckets.defined() != buckets)) ids = DeviceIds();
    try {
      stage_ids(host, kind.id_bound, buckets, device, ids, stream);
    } catch (const Error& e) {
      throw Error(fmt::format("batch: array '{}': {}", name, e.what()));
    }
    into.arrays[name] = ids.ids;
    return;
  }
  Tensor& on_device = into.arrays[name];
  if (!same_shape || on_device.dtype() != host.dtype()) on_device = Tensor::empty(host.shape(), host.dtype(), device);
  upload_into(on_device, host.raw_data(), host.numel() * int64_t(dtype_size(host.dtype())), stream);
}

}  // namespace

void stage(const Batch& batch, const Layout& layout, Device device, GpuStream stream, DeviceBatch& into,
           bool with_buckets) {
  EMBER_CHECK(device.is_cuda(), "batch: staging goes to a GPU, not {}", device.str());
  for (const auto& [name, host] : batch) {
    const auto kind = layout.find(name);
    stage_array(name, host, kind == layout.end() ? ArrayKind{} : kind->second, device, stream, into, with_buckets);
  }
}

}  // namespace ember::train
