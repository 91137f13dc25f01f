// SHA-1 implementation: 512-bit blocks, 80 rounds, big-endian length padding.
#include "examples/imdb/sha1.h"

#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

namespace {

uint32_t rotate_left(uint32_t value, int bits) { return (value << bits) | (value >> (32 - bits)); }

}  // namespace

Sha1::Sha1() : state_{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u} {}

void Sha1::process_block(const uint8_t* block) {
  // Message schedule: 16 big-endian words from the block, expanded to 80.
  uint32_t w[80];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) |
           (uint32_t(block[4 * i + 2]) << 8) | uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 80; ++i) w[i] = rotate_left(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);

  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3], e = state_[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999u;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1u;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDCu;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6u;
    }
    uint32_t next = rotate_left(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rotate_left(b, 30);
    b = a;
    a = next;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
}

void Sha1::update(const void* data, size_t size) {
  EMBER_CHECK(!finished_, "sha1: update() called after hex_digest()");
  const auto* bytes = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  // Top up a partly filled buffer first, then hash whole blocks straight from the input.
  if (buffered_ > 0) {
    size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes, take);
    buffered_ += take;
    bytes += take;
    size -= take;
    if (buffered_ < buffer_.size()) return;
    process_block(buffer_.data());
    buffered_ = 0;
  }
  while (size >= 64) {
    process_block(bytes);
    bytes += 64;
    size -= 64;
  }
  std::memcpy(buffer_.data(), bytes, size);
  buffered_ = size;
}

std::string Sha1::hex_digest() {
  EMBER_CHECK(!finished_, "sha1: hex_digest() called twice");
  // Padding: a 1 bit, zeros up to 56 mod 64 bytes, then the bit length as big-endian u64.
  uint64_t total_bits = total_bytes_ * 8;
  uint8_t padding[72] = {0x80};
  size_t zeros_end = (buffered_ < 56) ? 56 - buffered_ : 120 - buffered_;
  for (int i = 0; i < 8; ++i) padding[zeros_end + i] = uint8_t(total_bits >> (56 - 8 * i));
  update(padding, zeros_end + 8);
  finished_ = true;

  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state_) {
    for (int shift = 28; shift >= 0; shift -= 4) out += hex[(word >> shift) & 0xF];
  }
  return out;
}

std::string sha1_hex(std::string_view bytes) {
  Sha1 hasher;
  hasher.update(bytes);
  return hasher.hex_digest();
}

std::string sha1_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "sha1: cannot open '{}' for reading", path);
  Sha1 hasher;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    hasher.update(chunk.data(), size_t(in.gcount()));
  }
  EMBER_CHECK(in.eof(), "sha1: read error in '{}'", path);
  return hasher.hex_digest();
}

}  // namespace ember::imdb
