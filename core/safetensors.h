// Raw safetensors files (the Hugging Face format): named byte blobs with dtype and shape, no tensor class.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::safetensors {

// Layout of a file:
//   8 bytes     N, the header length, as a little-endian uint64
//   N bytes     JSON header: {"__metadata__": {"key": "value", ...},
//                             "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//               padded with spaces so that the data starts at a multiple of 8
//   the rest    the data section: each tensor's raw little-endian bytes at [begin, end)
//               (offsets count from the start of the data section)
// This is the layout python's `safetensors` package reads and writes.

struct Entry {
  std::string name;
  std::string dtype;  // "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", ...
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;  // numel * dtype size bytes, little-endian, row-major
};

// Bytes per element of a dtype name; throws ember::Error for an unknown dtype.
int64_t dtype_size(const std::string& dtype);

// Writes the entries in the given order. Atomic: writes path + ".tmp.<pid>", fsyncs it and
// renames it over `path`, so a failure (bad entry, full disk, unwritable folder) leaves the
// previous file intact. Throws ember::Error naming the file and the tensor for: an empty,
// duplicate or "__metadata__" name, unknown dtype, negative dimension, or data whose size
// is not numel * dtype size.
void save(const std::string& path, const std::vector<Entry>& entries,
          const std::map<std::string, std::string>& metadata = {});

struct File {
  std::vector<Entry> entries;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;
  // The entry with this name; throws ember::Error listing the names if there is none.
  const Entry& at(const std::string& name) const;
};

// Reads and checks a whole file. Everything in the header is checked before any data is
// read: size, header length, JSON, dtypes, shapes, offsets inside the data section and
// matching numel * dtype size, no two tensors overlapping. Errors name the file and tensor.
File load(const std::string& path);

}  // namespace ember::safetensors
