// Digests: OpenSSL's EVP interface (one code path for every algorithm), errors as ember::Error.
#include "examples/imdb/digest.h"

#include <openssl/evp.h>

#include <cstddef>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

struct Digest::State {
  EVP_MD_CTX* context = nullptr;
  bool finished = false;
};

Digest::Digest(DigestKind kind) : state_(std::make_unique<State>()) {
  state_->context = EVP_MD_CTX_new();
  EMBER_CHECK(state_->context != nullptr, "digest: out of memory");
  const EVP_MD* algorithm = kind == DigestKind::Sha1 ? EVP_sha1() : EVP_sha256();
  if (EVP_DigestInit_ex(state_->context, algorithm, nullptr) != 1) {
    EVP_MD_CTX_free(state_->context);
    fail("digest: libcrypto cannot start {}", kind == DigestKind::Sha1 ? "SHA-1" : "SHA-256");
  }
}

Digest::~Digest() { EVP_MD_CTX_free(state_->context); }

void Digest::update(const void* data, size_t size) {
  EMBER_CHECK(!state_->finished, "digest: update() called after hex_digest()");
  EMBER_CHECK(EVP_DigestUpdate(state_->context, data, size) == 1, "digest: libcrypto failed to hash {} bytes", size);
}

std::string Digest::hex_digest() {
  EMBER_CHECK(!state_->finished, "digest: hex_digest() called twice");
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EMBER_CHECK(EVP_DigestFinal_ex(state_->context, bytes, &length) == 1, "digest: libcrypto failed to finish");
  state_->finished = true;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 0xF];
  }
  return out;
}

std::string digest_hex(DigestKind kind, std::string_view bytes) {
  Digest digest(kind);
  digest.update(bytes);
  return digest.hex_digest();
}

std::string digest_file(DigestKind kind, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "digest: cannot open '{}' for reading", path);
  Digest digest(kind);
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    digest.update(chunk.data(), size_t(in.gcount()));
  }
  EMBER_CHECK(in.eof(), "digest: read error in '{}'", path);
  return digest.hex_digest();
}

}  // namespace ember::imdb
