// Tests for the IMDb example's SHA-1: published test vectors, chunked updates, files.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "examples/imdb/sha1.h"

using ember::imdb::Sha1;
using ember::imdb::sha1_file;
using ember::imdb::sha1_hex;

TEST_CASE("sha1: known test vectors") {
  CHECK(sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  CHECK(sha1_hex("The quick brown fox jumps over the lazy dog") == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12");
  CHECK(sha1_hex(std::string(1000000, 'a')) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}

TEST_CASE("sha1: feeding bytes in pieces gives the same digest as all at once") {
  // Lengths around the 55/56/64-byte padding boundaries, split at every possible point.
  for (size_t length : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200}) {
    std::string message;
    for (size_t i = 0; i < length; ++i) message += char('a' + i % 26);
    std::string whole = sha1_hex(message);
    for (size_t split = 0; split <= length; ++split) {
      Sha1 hasher;
      hasher.update(std::string_view(message).substr(0, split));
      hasher.update(std::string_view(message).substr(split));
      CHECK(hasher.hex_digest() == whole);
    }
  }
}

TEST_CASE("sha1: a spent hasher refuses more input") {
  Sha1 hasher;
  hasher.update("abc");
  CHECK(hasher.hex_digest() == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK_THROWS_AS(hasher.update("more"), ember::Error);
  CHECK_THROWS_AS(hasher.hex_digest(), ember::Error);
}

TEST_CASE("sha1: files, and a clear error for a missing file") {
  auto path = std::filesystem::temp_directory_path() / ("ember_sha1_test_" + std::to_string(::getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  CHECK(sha1_file(path.string()) == "a9993e364706816aba3e25717850c26c9cd0d89d");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(sha1_file(path.string()), doctest::Contains(path.string().c_str()), ember::Error);
}
