// SHA-256 through libcrypto's EVP interface (OpenSSL chooses the CPU's
// fastest code). File hashing and the digest cache are in sha256_cache.cc.
#include "base/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "base/check.h"

namespace kx {
namespace {

// Fetched once: EVP_sha256() would look the algorithm up again on every
// EVP_DigestInit_ex (OpenSSL 3's "implicit fetch"), which costs more than
// hashing a short message.
const EVP_MD* Sha256Md() {
  static const EVP_MD* md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    KX_CHECK_MSG(fetched != nullptr, "libcrypto has no SHA-256 (EVP_MD_fetch failed)");
    return fetched;
  }();
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  KX_CHECK_MSG(ctx_ != nullptr, "EVP_MD_CTX_new failed (out of memory)");
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(const Sha256& other) : ctx_(EVP_MD_CTX_new()), finished_(other.finished_) {
  KX_CHECK_MSG(ctx_ != nullptr, "EVP_MD_CTX_new failed (out of memory)");
  KX_CHECK_MSG(EVP_MD_CTX_copy_ex(ctx_, other.ctx_) == 1, "EVP_MD_CTX_copy_ex failed");
}

Sha256& Sha256::operator=(const Sha256& other) {
  if (this != &other) {
    KX_CHECK_MSG(EVP_MD_CTX_copy_ex(ctx_, other.ctx_) == 1, "EVP_MD_CTX_copy_ex failed");
    finished_ = other.finished_;
  }
  return *this;
}

void Sha256::Reset() {
  KX_CHECK_MSG(EVP_DigestInit_ex(ctx_, Sha256Md(), nullptr) == 1, "EVP_DigestInit_ex failed");
  finished_ = false;
}

void Sha256::Update(const void* data, size_t size) {
  KX_CHECK_MSG(!finished_, "Sha256::Update after Finish (call Reset first)");
  if (size == 0) return;
  KX_CHECK_MSG(EVP_DigestUpdate(ctx_, data, size) == 1, "EVP_DigestUpdate failed");
}

std::array<uint8_t, Sha256::kDigestBytes> Sha256::Finish() {
  KX_CHECK_MSG(!finished_, "Sha256::Finish called twice (call Reset first)");
  std::array<uint8_t, kDigestBytes> digest;
  unsigned int len = 0;
  KX_CHECK_MSG(EVP_DigestFinal_ex(ctx_, digest.data(), &len) == 1 && len == kDigestBytes,
               "EVP_DigestFinal_ex failed");
  finished_ = true;
  return digest;
}

std::string Sha256::BackendName() {
  std::string name = OpenSSL_version(OPENSSL_VERSION);
  const OSSL_PROVIDER* prov = EVP_MD_get0_provider(Sha256Md());
  if (prov != nullptr) name += std::string(", provider ") + OSSL_PROVIDER_get0_name(prov);
  return name;
}

std::string DigestHex(const std::array<uint8_t, Sha256::kDigestBytes>& digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex(2 * digest.size(), '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kHexDigits[digest[i] >> 4];
    hex[2 * i + 1] = kHexDigits[digest[i] & 0xF];
  }
  return hex;
}

std::string Sha256Hex(const void* data, size_t size) {
  Sha256 h;
  h.Update(data, size);
  return DigestHex(h.Finish());
}

}  // namespace kx
