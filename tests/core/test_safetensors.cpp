// Tests for raw safetensors files: round trip, the exact layout, every kind of corruption, atomic save.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

#include <fmt/format.h>

namespace st = ember::safetensors;
using Bytes = std::vector<unsigned char>;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
struct SafetensorsTempDir {
  std::filesystem::path path;
  SafetensorsTempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ember_safetensors_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~SafetensorsTempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

template <typename T>
Bytes bytes_of(const std::vector<T>& values) {
  Bytes bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A file with the given 8-byte length field, header text and data section, written verbatim.
std::string write_raw(const std::string& path, uint64_t header_length, const std::string& header,
                      const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(char(header_length >> (8 * i)));
  out << header << data;
  return path;
}

// The same, with the length field set to the header's real length.
std::string write_raw(const std::string& path, const std::string& header, const std::string& data) {
  return write_raw(path, header.size(), header, data);
}

}  // namespace

TEST_CASE("safetensors: round trip of several dtypes, shapes and metadata") {
  SafetensorsTempDir dir;
  std::vector<st::Entry> entries{
      {"embedding.weight", "F32", {2, 3}, bytes_of(std::vector<float>{1, 2, 3, 4, 5, -6.5f})},
      {"step", "I64", {}, bytes_of(std::vector<int64_t>{12345678901})},  // a scalar: shape []
      {"mask", "U8", {5}, Bytes{1, 0, 1, 1, 0}},
      {"empty", "BF16", {0, 4}, Bytes{}},
      {"ids", "I32", {1, 1, 2}, bytes_of(std::vector<int32_t>{-7, 7})},
      {"double", "F64", {1}, bytes_of(std::vector<double>{3.25})},
      {"half", "F16", {2}, Bytes{0x00, 0x3C, 0x00, 0xC0}},
  };
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"epoch", "3"}, {"note", "héllo \"quoted\""}};
  std::string path = dir / "model.safetensors";
  st::save(path, entries, metadata);

  st::File file = st::load(path);
  CHECK(file.metadata == metadata);
  REQUIRE(file.entries.size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    CAPTURE(entries[i].name);
    CHECK(file.entries[i].name == entries[i].name);  // kept in the order saved
    CHECK(file.entries[i].dtype == entries[i].dtype);
    CHECK(file.entries[i].shape == entries[i].shape);
    CHECK(file.entries[i].data == entries[i].data);
  }
  CHECK(file.at("ids").data == entries[4].data);
  CHECK_THROWS_WITH_AS(file.at("idz"), doctest::Contains("no tensor named 'idz'"), ember::Error);
  CHECK_THROWS_WITH_AS(file.at("idz"), doctest::Contains("embedding.weight"), ember::Error);

  // No metadata and no tensors is a valid file too.
  st::save(dir / "empty.safetensors", {});
  CHECK(st::load(dir / "empty.safetensors").entries.empty());
  CHECK(read_file(dir / "empty.safetensors") == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

TEST_CASE("safetensors: the bytes are exactly what python's safetensors writes") {
  SafetensorsTempDir dir;
  // save_file({"a": torch.tensor([1.0, 2.0])}, path, metadata={"format": "pt"}) writes this header
  // (no spaces, "__metadata__" first, fields dtype/shape/data_offsets), padded with spaces to a
  // multiple of 8 bytes, then the little-endian floats.
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data("\x00\x00\x80\x3F\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
  std::string expected = read_file(write_raw(dir / "python.safetensors", header, data));

  st::File file = st::load(dir / "python.safetensors");
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.at("a").shape == std::vector<int64_t>{2});
  CHECK(file.at("a").data == bytes_of(std::vector<float>{1.0f, 2.0f}));

  st::save(dir / "ours.safetensors", {{"a", "F32", {2}, bytes_of(std::vector<float>{1.0f, 2.0f})}}, {{"format", "pt"}});
  CHECK(read_file(dir / "ours.safetensors") == expected);
}

TEST_CASE("safetensors: readers' other valid choices load too") {
  SafetensorsTempDir dir;
  // Tensors listed out of data order, pretty-printed JSON, and an unpadded header.
  std::string header = R"({ "b": {"data_offsets": [4, 8], "shape": [1], "dtype": "I32"},
                            "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]} })";
  write_raw(dir / "f.safetensors", header, std::string("\x01\0\0\0\x02\0\0\0", 8));
  st::File file = st::load(dir / "f.safetensors");
  REQUIRE(file.entries.size() == 2);
  CHECK(file.entries[0].name == "a");  // in data order
  CHECK(file.at("b").data == Bytes{2, 0, 0, 0});
  CHECK(file.metadata.empty());
}

TEST_CASE("safetensors: corrupt files are clear errors naming the file and the tensor") {
  SafetensorsTempDir dir;
  std::string path = dir / "bad.safetensors";
  auto expect_error = [&](const std::string& fragment) {
    CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains(path.c_str()), ember::Error);
    CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains(fragment.c_str()), ember::Error);
  };
  auto tensor = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
  };
  const std::string eight_bytes(8, '\0');

  CHECK_THROWS_WITH_AS(st::load(dir / "missing.safetensors"), doctest::Contains("does not exist"), ember::Error);
  CHECK_THROWS_WITH_AS(st::load(dir.path.string()), doctest::Contains("not a regular file"), ember::Error);

  std::ofstream(path, std::ios::binary) << "abc";
  expect_error("too small");
  write_raw(path, 200'000'000, "{}", "");
  expect_error("over the 100000000 byte limit");
  write_raw(path, 64, "{}", "");
  expect_error("truncated");
  // Found by fuzzing: a number too large for a double is nlohmann's out_of_range, not a parse error.
  write_raw(path, R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", eight_bytes);
  expect_error("header is not valid JSON");
  write_raw(path, "[1, 2]", "");
  expect_error("does not start with '{'");
  write_raw(path, "{\"a\": ", "");
  expect_error("not valid JSON");
  write_raw(path, "{\"a\": 1} {", "");
  expect_error("not valid JSON");
  write_raw(path, "{\"a\":1}", "");
  expect_error("tensor 'a': header entry is a JSON number");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2]}})", eight_bytes);
  expect_error("tensor 'a': header entry has no \"data_offsets\"");
  write_raw(path, "{\"a\":" + tensor("F33", "[2]", "[0,8]") + "}", eight_bytes);
  expect_error("tensor 'a': unknown dtype \"F33\"");
  write_raw(path, R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", eight_bytes);
  expect_error("\"dtype\" is not a string");
  write_raw(path, "{\"a\":" + tensor("F32", "[-2]", "[0,8]") + "}", eight_bytes);
  expect_error("not a non-negative integer");
  write_raw(path, "{\"a\":" + tensor("F32", "[2.0]", "[0,8]") + "}", eight_bytes);
  expect_error("not a non-negative integer");
  write_raw(path, "{\"a\":" + tensor("F32", "2", "[0,8]") + "}", eight_bytes);
  expect_error("\"shape\" is not an array");
  write_raw(path, "{\"a\":" + tensor("F32", "[2]", "[0,8,9]") + "}", eight_bytes);
  expect_error("is not [begin, end]");
  write_raw(path, "{\"a\":" + tensor("F32", "[2]", "[8,0]") + "}", eight_bytes);
  expect_error("is not a valid [begin, end]");
  write_raw(path, "{\"a\":" + tensor("F32", "[2]", "[0,8]") + "}", std::string(5, '\0'));  // data cut short
  expect_error("tensor 'a': data_offsets [0,8] go past the end of the data section (5 bytes");
  write_raw(path, "{\"a\":" + tensor("F32", "[3]", "[0,8]") + "}", eight_bytes);
  expect_error("tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0,8] hold 8");
  write_raw(path, "{\"a\":" + tensor("F32", "[4611686018427387904,4]", "[0,8]") + "}", eight_bytes);
  expect_error("too many elements");  // the byte count overflows int64
  write_raw(path, "{\"a\":" + tensor("F32", "[2]", "[0,8]") + ",\"b\":" + tensor("U8", "[4]", "[6,10]") + "}",
            std::string(10, '\0'));
  expect_error("tensors 'a' [0, 8) and 'b' [6, 10) overlap");
  write_raw(path, "{\"a\":" + tensor("F32", "[2]", "[0,8]") + ",\"z\":" + tensor("U8", "[0]", "[4,4]") +
                      ",\"b\":" + tensor("U8", "[2]", "[6,8]") + "}",
            eight_bytes);
  expect_error("overlap");  // an empty tensor in between does not hide the overlap
  write_raw(path, "{\"a\":" + tensor("U8", "[4]", "[0,4]") + ",\"a\":" + tensor("U8", "[4]", "[4,8]") + "}",
            eight_bytes);
  expect_error("tensor 'a' appears twice");
  write_raw(path, R"({"__metadata__":{"epoch":3}})", "");
  expect_error("metadata 'epoch' is not a string");
  write_raw(path, R"({"__metadata__":"pt"})", "");
  expect_error("\"__metadata__\" is not an object");
  write_raw(path, std::string("{\"caf\xC3\": 1}"), "");  // invalid UTF-8 in the header
  expect_error("not valid JSON");
}

TEST_CASE("safetensors: save refuses bad entries before touching the file") {
  SafetensorsTempDir dir;
  std::string path = dir / "model.safetensors";
  auto expect_error = [&](const std::vector<st::Entry>& entries, const char* fragment,
                          const std::map<std::string, std::string>& metadata = {}) {
    CHECK_THROWS_WITH_AS(st::save(path, entries, metadata), doctest::Contains(fragment), ember::Error);
    CHECK_FALSE(std::filesystem::exists(path));
  };
  expect_error({{"w", "F32", {2, 2}, Bytes(12)}}, "tensor 'w': shape [2, 2] of F32 needs 16 bytes but data has 12");
  expect_error({{"w", "F31", {1}, Bytes(4)}}, "tensor 'w': unknown dtype");
  expect_error({{"w", "F32", {-1}, Bytes{}}}, "negative dimension");
  expect_error({{"w", "U8", {1}, Bytes(1)}, {"w", "U8", {1}, Bytes(1)}}, "tensor 'w' appears twice");
  expect_error({{"", "U8", {1}, Bytes(1)}}, "empty name");
  expect_error({{"__metadata__", "U8", {1}, Bytes(1)}}, "reserved");
  expect_error({{std::string("bad\xFF"), "U8", {1}, Bytes(1)}}, "cannot encode the header");
  expect_error({}, "cannot encode the header", {{"k", std::string("\xC3")}});
  CHECK(st::dtype_size("BF16") == 2);
  CHECK_THROWS_AS(st::dtype_size("float32"), ember::Error);
}

TEST_CASE("safetensors: a failed save keeps the previous file intact") {
  SafetensorsTempDir dir;
  std::string path = dir / "model.safetensors";
  std::vector<st::Entry> old_entries{{"w", "F32", {2}, bytes_of(std::vector<float>{1, 2})}};
  st::save(path, old_entries);
  std::string old_bytes = read_file(path);

  // A bad entry: refused before any write.
  CHECK_THROWS_AS(st::save(path, {{"w", "F32", {3}, Bytes(4)}}), ember::Error);
  CHECK(read_file(path) == old_bytes);

  // A write that fails: a folder sits where the temporary file would be created.
  std::string temp_path = path + ".tmp." + std::to_string(::getpid());
  std::filesystem::create_directory(temp_path);
  CHECK_THROWS_WITH_AS(st::save(path, {{"w", "F32", {1}, bytes_of(std::vector<float>{9})}}), doctest::Contains(path.c_str()),
                       ember::Error);
  CHECK(read_file(path) == old_bytes);
  CHECK(st::load(path).at("w").data == old_entries[0].data);
  std::filesystem::remove(temp_path);

  // A folder that does not exist.
  CHECK_THROWS_WITH_AS(st::save(dir / "no/such/folder/model.safetensors", old_entries),
                       doctest::Contains("no/such/folder"), ember::Error);

  // A successful save replaces the file and leaves no temporary file behind.
  st::save(path, {{"w", "F32", {1}, bytes_of(std::vector<float>{9})}});
  CHECK(st::load(path).at("w").data == bytes_of(std::vector<float>{9}));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("safetensors: the tensors must cover the data section exactly (no gap, nothing left over)") {
  SafetensorsTempDir dir;
  std::string path = dir / "cover.safetensors";
  auto tensor = [](const std::string& shape, const std::string& offsets) {
    return R"({"dtype":"U8","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
  };
  // A header padded with spaces whose length field is one byte short: the JSON still parses, and
  // every tensor would be read one byte early. The byte left over at the end gives it away.
  std::string header = "{\"a\":" + tensor("[4]", "[0,4]") + "}";
  header.append(8 - header.size() % 8, ' ');
  write_raw(path, header.size() - 1, header, "\x01\x02\x03\x04");
  CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains("the tensors cover 4 bytes but the data section has 5"),
                       ember::Error);
  write_raw(path, header.size(), header, "\x01\x02\x03\x04");
  CHECK(st::load(path).at("a").data == Bytes{1, 2, 3, 4});
  // A gap between two tensors, and one before the first.
  write_raw(path, "{\"a\":" + tensor("[2]", "[0,2]") + ",\"b\":" + tensor("[1]", "[3,4]") + "}", "\x01\x02\x03\x04");
  CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains("bytes [2, 3) of the data section belong to no tensor"),
                       ember::Error);
  write_raw(path, "{\"b\":" + tensor("[1]", "[1,2]") + "}", "\x01\x02");
  CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains("bytes [0, 1)"), ember::Error);
  // Bytes appended after the last tensor.
  write_raw(path, "{\"a\":" + tensor("[2]", "[0,2]") + "}", "\x01\x02\x03");
  CHECK_THROWS_WITH_AS(st::load(path), doctest::Contains("cover 2 bytes but the data section has 3"), ember::Error);
  // Empty tensors anywhere in the tiling, and a file of only empty tensors, are fine.
  write_raw(path, "{\"a\":" + tensor("[2]", "[0,2]") + ",\"e\":" + tensor("[0]", "[2,2]") + "}", "\x01\x02");
  CHECK(st::load(path).entries.size() == 2);
  write_raw(path, "{\"e\":" + tensor("[0]", "[0,0]") + "}", "");
  CHECK(st::load(path).entries.size() == 1);
}

TEST_CASE("safetensors: a header of 40,000 names is read in linear time, duplicates still found") {
  // nlohmann's parse callback rescans the whole object after every entry: 40,000 entries took 48 s.
  SafetensorsTempDir dir;
  std::string header = "{";
  const int count = 40000;
  for (int i = 0; i < count; ++i)
    header += (i ? "," : "") + fmt::format(R"("t{}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", i);
  write_raw(dir / "many.safetensors", header + "}", "");
  // This process's CPU time, not the wall clock: other processes on a loaded machine do not count.
  const std::clock_t start = std::clock();
  CHECK(st::load(dir / "many.safetensors").entries.size() == size_t(count));
  write_raw(dir / "twice.safetensors", header + R"(,"t17":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", "");
  CHECK_THROWS_WITH_AS(st::load(dir / "twice.safetensors"), doctest::Contains("tensor 't17' appears twice"),
                       ember::Error);
  const double seconds = double(std::clock() - start) / CLOCKS_PER_SEC;
  INFO("two loads of 40,000 entries took " << seconds << " s of CPU time");
  CHECK(seconds < 15);  // about 0.2 s here (ASan: a few); quadratic was minutes
}
