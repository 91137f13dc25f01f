// Digests through OpenSSL's libcrypto (Debian's libssl-dev): SHA-1 to check the downloaded
// dataset against its published digest, SHA-256 to fingerprint a run's data.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace ember::imdb {

// NOTE: SHA-1 is broken for security purposes (collisions can be made on purpose). Here it only
// detects truncated or corrupted downloads, and it is the digest npm publishes for the package.
enum class DigestKind { Sha1, Sha256 };

// Usage: Digest d(DigestKind::Sha256); d.update(bytes); ...; std::string hex = d.hex_digest();
class Digest {
 public:
  explicit Digest(DigestKind kind);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Lowercase hex (40 characters for SHA-1, 64 for SHA-256). Call once; the object is spent afterwards.
  std::string hex_digest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string digest_hex(DigestKind kind, std::string_view bytes);
// The digest of a whole file, read in chunks; throws ember::Error naming the file if it cannot be read.
std::string digest_file(DigestKind kind, const std::string& path);

}  // namespace ember::imdb
