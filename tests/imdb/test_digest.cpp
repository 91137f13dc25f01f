// Tests for the IMDb example's digests (libcrypto): published test vectors, chunked updates, files.
#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

#include "core/error.h"
#include "examples/imdb/digest.h"

using ember::imdb::Digest;
using ember::imdb::DigestKind;
using ember::imdb::digest_file;
using ember::imdb::digest_hex;

TEST_CASE("digest: SHA-1 and SHA-256 test vectors") {
  CHECK(digest_hex(DigestKind::Sha1, "") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(digest_hex(DigestKind::Sha1, "abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(digest_hex(DigestKind::Sha1, std::string(1000000, 'a')) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  CHECK(digest_hex(DigestKind::Sha256, "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("digest: feeding bytes in pieces gives the same digest, and a spent digest refuses more") {
  std::string message;
  for (size_t i = 0; i < 130; ++i) message += char('a' + i % 26);
  const std::string whole = digest_hex(DigestKind::Sha1, message);
  for (size_t split : {0, 1, 55, 64, 65, 130}) {
    Digest digest(DigestKind::Sha1);
    digest.update(std::string_view(message).substr(0, split));
    digest.update(std::string_view(message).substr(split));
    CHECK(digest.hex_digest() == whole);
  }
  Digest spent(DigestKind::Sha256);
  spent.hex_digest();
  CHECK_THROWS_AS(spent.update("more"), ember::Error);
  CHECK_THROWS_AS(spent.hex_digest(), ember::Error);
}

TEST_CASE("digest: files, and a clear error for a missing file") {
  auto path = std::filesystem::temp_directory_path() / ("ember_digest_test_" + std::to_string(::getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  CHECK(digest_file(DigestKind::Sha1, path.string()) == "a9993e364706816aba3e25717850c26c9cd0d89d");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(digest_file(DigestKind::Sha1, path.string()), doctest::Contains(path.string().c_str()),
                       ember::Error);
}
