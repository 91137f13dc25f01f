// SHA-1 (FIPS 180-4), small and readable: used only to check that a downloaded file is intact.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::imdb {

// NOTE: SHA-1 is broken for security purposes (collisions can be made on purpose).
// Here it only detects truncated or corrupted downloads, which it does well.
class Sha1 {
 public:
  Sha1();
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The 40-character lowercase hex digest. Call once; the object is spent afterwards.
  std::string hex_digest();

 private:
  void process_block(const uint8_t* block);

  std::array<uint32_t, 5> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;        // bytes waiting in buffer_
  uint64_t total_bytes_ = 0;   // message length so far
  bool finished_ = false;
};

// SHA-1 of a byte string, as 40 lowercase hex characters.
std::string sha1_hex(std::string_view bytes);

// SHA-1 of a whole file (read in chunks); throws ember::Error if it cannot be read.
std::string sha1_file(const std::string& path);

}  // namespace ember::imdb
