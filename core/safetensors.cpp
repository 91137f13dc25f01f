// safetensors reading and writing: header JSON via nlohmann::json, data as raw bytes, atomic save.
#include "core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::safetensors {

namespace {

constexpr uint64_t max_header_bytes = 100'000'000;  // the limit python's safetensors uses too
constexpr const char* metadata_key = "__metadata__";

struct DtypeInfo {
  const char* name;
  int64_t size;
};

// The dtypes of the format (not all of them are tensor types in Ember).
constexpr DtypeInfo known_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8},
};

// Size in bytes of a tensor, or -1 if the element count overflows int64.
int64_t byte_size(const std::vector<int64_t>& shape, int64_t element_size) {
  int64_t bytes = element_size;
  for (int64_t dim : shape) {
    if (dim != 0 && bytes > INT64_MAX / dim) return -1;
    bytes *= dim;
  }
  return bytes;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// A non-negative JSON integer (as int64), or -1 if `value` is anything else.
int64_t non_negative_integer(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) return -1;  // nlohmann stores 0, 1, 2, ... as unsigned
  uint64_t number = value.get<uint64_t>();
  return number <= uint64_t(INT64_MAX) ? int64_t(number) : -1;
}

// Reads and checks one tensor's header entry (everything except overlaps).
Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& info,
                  uint64_t data_section_size, int64_t& begin, int64_t& end) {
  auto bad = [&](const std::string& problem) {
    fail("safetensors file '{}': tensor '{}': {}", path, name, problem);
  };
  if (!info.is_object()) bad("header entry is a JSON " + std::string(info.type_name()) + ", expected an object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(field)) bad(std::string("header entry has no \"") + field + "\"");
  }

  Entry entry;
  entry.name = name;
  const auto& dtype = info["dtype"];
  if (!dtype.is_string()) bad("\"dtype\" is not a string");
  entry.dtype = dtype.get<std::string>();
  int64_t element_size = 0;
  for (const DtypeInfo& known : known_dtypes) {
    if (entry.dtype == known.name) element_size = known.size;
  }
  if (element_size == 0) bad("unknown dtype \"" + entry.dtype + "\"");

  const auto& shape = info["shape"];
  if (!shape.is_array()) bad("\"shape\" is not an array");
  for (const auto& dim : shape) {
    int64_t size = non_negative_integer(dim);
    if (size < 0) bad("\"shape\" " + shape.dump() + " has an entry that is not a non-negative integer");
    entry.shape.push_back(size);
  }

  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) bad("\"data_offsets\" is not [begin, end]");
  begin = non_negative_integer(offsets[0]);
  end = non_negative_integer(offsets[1]);
  if (begin < 0 || end < 0 || begin > end) bad("\"data_offsets\" " + offsets.dump() + " is not a valid [begin, end]");
  if (uint64_t(end) > data_section_size) {
    bad(fmt::format("data_offsets {} go past the end of the data section ({} bytes; file truncated?)", offsets.dump(),
                    data_section_size));
  }
  int64_t expected = byte_size(entry.shape, element_size);
  if (expected < 0) bad("shape " + shape_text(entry.shape) + " has too many elements (overflow)");
  if (expected != end - begin) {
    bad(fmt::format("shape {} of {} needs {} bytes but data_offsets {} hold {}", shape_text(entry.shape), entry.dtype,
                    expected, offsets.dump(), end - begin));
  }
  return entry;
}

// nlohmann's DOM builder, plus a set of the top-level keys: a tensor name given twice is
// noticed in O(log n) per name. (nlohmann's parse callback would do it too, but its parser then
// rescans the whole object after every entry: 40,000 entries took 48 s.)
class DuplicateNoticingSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<nlohmann::json>;
  DuplicateNoticingSax(nlohmann::json& result, std::string& duplicate) : Base(result), duplicate_(duplicate) {}
  bool start_object(std::size_t elements) {
    ++depth_;
    return Base::start_object(elements);
  }
  bool end_object() {
    --depth_;
    return Base::end_object();
  }
  bool key(string_t& name) {
    if (depth_ == 1 && duplicate_.empty() && !keys_.insert(name).second) duplicate_ = name;
    return Base::key(name);
  }

 private:
  std::string& duplicate_;
  std::set<std::string> keys_;
  int depth_ = 0;
};

// The header's JSON; `duplicate` receives a top-level name given twice (the first one seen).
// Throws nlohmann::json::exception for text that is not exactly one JSON value (whitespace
// around it is allowed: the format pads the header with spaces).
nlohmann::json parse_header(const std::string& text, std::string& duplicate) {
  nlohmann::json result;
  DuplicateNoticingSax sax(result, duplicate);
  nlohmann::json::sax_parse(text, &sax, nlohmann::json::input_format_t::json, /*strict=*/true);
  return result;
}

}  // namespace

int64_t dtype_size(const std::string& dtype) {
  for (const DtypeInfo& known : known_dtypes) {
    if (dtype == known.name) return known.size;
  }
  fail("safetensors: unknown dtype \"{}\"", dtype);
}

void save(const std::string& path, const std::vector<Entry>& entries,
          const std::map<std::string, std::string>& metadata) {
  // Check everything before creating any file.
  // NOTE: ordered_json keeps insertion order, so the header reads like python's:
  // "__metadata__" first, then the tensors in data order, each as dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[metadata_key] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const Entry& entry : entries) {
    EMBER_CHECK(!entry.name.empty(), "safetensors save '{}': a tensor has an empty name", path);
    EMBER_CHECK(entry.name != metadata_key, "safetensors save '{}': '{}' is reserved, not a tensor name", path,
                metadata_key);
    EMBER_CHECK(names.insert(entry.name).second, "safetensors save '{}': tensor '{}' appears twice", path, entry.name);
    bool known = std::any_of(std::begin(known_dtypes), std::end(known_dtypes),
                             [&](const DtypeInfo& info) { return entry.dtype == info.name; });
    EMBER_CHECK(known, "safetensors save '{}': tensor '{}': unknown dtype \"{}\"", path, entry.name, entry.dtype);
    for (int64_t dim : entry.shape) {
      EMBER_CHECK(dim >= 0, "safetensors save '{}': tensor '{}': negative dimension in shape {}", path, entry.name,
                  shape_text(entry.shape));
    }
    int64_t expected = byte_size(entry.shape, dtype_size(entry.dtype));
    EMBER_CHECK(expected >= 0, "safetensors save '{}': tensor '{}': shape {} has too many elements (overflow)", path,
                entry.name, shape_text(entry.shape));
    EMBER_CHECK(uint64_t(expected) == entry.data.size(),
                "safetensors save '{}': tensor '{}': shape {} of {} needs {} bytes but data has {}", path, entry.name,
                shape_text(entry.shape), entry.dtype, expected, entry.data.size());
    header[entry.name] = {{"dtype", entry.dtype},
                          {"shape", entry.shape},
                          {"data_offsets", {offset, offset + entry.data.size()}}};
    offset += entry.data.size();
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name or metadata string that is not UTF-8
    fail("safetensors save '{}': cannot encode the header: {}", path, e.what());
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(uint64_t(header_text.size()) >> (8 * i));

  std::vector<std::string_view> pieces{{reinterpret_cast<const char*>(length_bytes), 8}, header_text};
  for (const Entry& entry : entries)
    pieces.emplace_back(reinterpret_cast<const char*>(entry.data.data()), entry.data.size());
  write_file_atomically(path, pieces);  // temporary file, fsync, rename: the old file survives any failure
}

File load(const std::string& path) {
  std::error_code error;
  EMBER_CHECK(std::filesystem::exists(path, error), "safetensors file '{}' does not exist", path);
  EMBER_CHECK(std::filesystem::is_regular_file(path, error), "safetensors file '{}' is not a regular file", path);
  uint64_t file_size = std::filesystem::file_size(path, error);
  EMBER_CHECK(!error, "safetensors file '{}': cannot get its size: {}", path, error.message());
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "safetensors file '{}' cannot be opened for reading", path);
  EMBER_CHECK(file_size >= 8, "safetensors file '{}' is {} bytes, too small to be a safetensors file", path,
              file_size);

  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  EMBER_CHECK(in.good(), "safetensors file '{}': cannot read the header length", path);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t(length_bytes[i]) << (8 * i);
  EMBER_CHECK(header_size <= max_header_bytes, "safetensors file '{}': header length {} is over the {} byte limit "
              "(not a safetensors file?)", path, header_size, max_header_bytes);
  EMBER_CHECK(header_size <= file_size - 8, "safetensors file '{}': header length {} but only {} bytes follow "
              "(truncated?)", path, header_size, file_size - 8);

  std::string header_text(header_size, '\0');
  in.read(header_text.data(), std::streamsize(header_size));
  EMBER_CHECK(in.good(), "safetensors file '{}': cannot read the {}-byte header", path, header_size);
  EMBER_CHECK(!header_text.empty() && header_text[0] == '{',
              "safetensors file '{}': header does not start with '{{' (not a safetensors file?)", path);

  // Parse, noticing tensor names given twice (nlohmann would silently keep the last one).
  nlohmann::json header;
  std::string duplicate_key;
  try {
    header = parse_header(header_text, duplicate_key);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and also out_of_range for a number too large for a double ("1e999").
    fail("safetensors file '{}': header is not valid JSON: {}", path, e.what());
  }
  EMBER_CHECK(header.is_object(), "safetensors file '{}': header is a JSON {}, expected an object", path,
              header.type_name());
  EMBER_CHECK(duplicate_key.empty(), "safetensors file '{}': tensor '{}' appears twice in the header", path,
              duplicate_key);

  File file;
  uint64_t data_section_size = file_size - 8 - header_size;
  struct Span {
    int64_t begin, end;
    size_t entry;
  };
  std::vector<Span> spans;
  for (const auto& [name, info] : header.items()) {
    if (name == metadata_key) {
      EMBER_CHECK(info.is_object(), "safetensors file '{}': \"__metadata__\" is not an object", path);
      for (const auto& [key, value] : info.items()) {
        EMBER_CHECK(value.is_string(), "safetensors file '{}': metadata '{}' is not a string", path, key);
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    int64_t begin = 0, end = 0;
    file.entries.push_back(parse_entry(path, name, info, data_section_size, begin, end));
    spans.push_back(Span{begin, end, file.entries.size() - 1});
  }

  // The tensors must tile the data section exactly, as the format requires: sorted by offset,
  // each starts where the previous one ended (no overlap, no gap) and the last ends at the end
  // of the file. A header length off by a byte, which would shift every tensor, fails here.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  int64_t covered = 0;
  const Span* previous = nullptr;
  for (const Span& span : spans) {
    if (span.begin < covered) {
      fail("safetensors file '{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path,
           file.entries[previous->entry].name, previous->begin, previous->end, file.entries[span.entry].name,
           span.begin, span.end);
    }
    EMBER_CHECK(span.begin == covered,
                "safetensors file '{}': bytes [{}, {}) of the data section belong to no tensor (a gap before '{}'; "
                "wrong header length or data_offsets?)",
                path, covered, span.begin, file.entries[span.entry].name);
    covered = span.end;
    if (span.end > span.begin) previous = &span;
  }
  EMBER_CHECK(uint64_t(covered) == data_section_size,
              "safetensors file '{}': the tensors cover {} bytes but the data section has {} (wrong header length, "
              "or bytes appended?)",
              path, covered, data_section_size);

  // Header checked: now read each tensor's bytes, in data order.
  std::vector<Entry> ordered;
  ordered.reserve(spans.size());
  for (const Span& span : spans) {
    Entry& entry = file.entries[span.entry];
    entry.data.resize(size_t(span.end - span.begin));
    in.seekg(std::streamoff(8 + header_size + uint64_t(span.begin)));
    in.read(reinterpret_cast<char*>(entry.data.data()), std::streamsize(entry.data.size()));
    EMBER_CHECK(in.good(), "safetensors file '{}': tensor '{}': cannot read its {} bytes", path, entry.name,
                entry.data.size());
    ordered.push_back(std::move(entry));
  }
  file.entries = std::move(ordered);
  return file;
}

const Entry& File::at(const std::string& name) const {
  for (const Entry& entry : entries) {
    if (entry.name == name) return entry;
  }
  std::string names;  // the first few names, to help spot a typo
  for (size_t i = 0; i < entries.size() && i < 20; ++i) names += (i ? ", " : "") + entries[i].name;
  if (entries.size() > 20) names += fmt::format(", ... ({} in all)", entries.size());
  fail("safetensors: no tensor named '{}' (the file has: {})", name, names.empty() ? "no tensors" : names);
}

}  // namespace ember::safetensors
