// SHA-256 per FIPS 180-4 §6.2: a portable compression function and a SHA-NI
// one, chosen at run time. File hashing and its cache are in
// sha256_cache.cc.
#include "base/sha256.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace kx {
namespace {

// Round constants: the first 32 bits of the fractional parts of the cube
// roots of the first 64 primes (FIPS 180-4 §4.2.2).
alignas(64) constexpr uint32_t kRoundK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// Initial hash value (§5.3.3): fractional parts of the square roots of the
// first 8 primes.
constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// The length field at the end of the padded message (§5.1.1).
constexpr size_t kLengthBytes = 8;

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void CompressPortable(uint32_t state[8], const uint8_t* blocks, size_t n_blocks) {
  uint32_t w[64];
  for (size_t blk = 0; blk < n_blocks; ++blk, blocks += Sha256::kBlockBytes) {
    for (int t = 0; t < 16; ++t) w[t] = LoadBe32(blocks + 4 * t);
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t big_s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = h + big_s1 + ch + kRoundK[t] + w[t];
      const uint32_t big_s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
      const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = big_s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

// SHA-NI: sha256rnds2 does two rounds on the state held as two registers,
// {A,B,E,F} and {C,D,G,H} (highest lane first); sha256msg1/msg2 compute the
// message schedule four words at a time. The function is compiled for the
// SHA extensions only (target attribute), so the rest of kx_base stays
// baseline x86-64 and this is only called after the cpuid check.
__attribute__((target("sha,sse4.1,ssse3"))) void CompressShaNi(uint32_t state[8],
                                                               const uint8_t* blocks,
                                                               size_t n_blocks) {
  // Big-endian words: reverse the bytes within each 32-bit lane.
  const __m128i kByteSwap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);

  // state[0..3] = {a,b,c,d} (lane 0 = a), state[4..7] = {e,f,g,h}.
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  const __m128i badc = _mm_shuffle_epi32(abcd, 0xB1);  // lanes b,a,d,c
  const __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);  // lanes h,g,f,e
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);       // lanes f,e,b,a
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);    // lanes h,g,d,c

  for (size_t blk = 0; blk < n_blocks; ++blk, blocks += Sha256::kBlockBytes) {
    const __m128i abef_in = abef;
    const __m128i cdgh_in = cdgh;
    // msg[i % 4] holds W[4i .. 4i+3] for the current group of four rounds.
    __m128i msg[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      msg[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * i)),
                                kByteSwap);
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      if (g >= 4) {
        // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16] for t = 4g..4g+3:
        // msg1 gives W[t-16] + σ0(W[t-15]); alignr brings in W[t-7]; msg2
        // adds σ1 of the two previous words, including the ones it computes.
        const __m128i w_minus7 = _mm_alignr_epi8(msg[(g + 3) & 3], msg[(g + 2) & 3], 4);
        const __m128i partial =
            _mm_add_epi32(_mm_sha256msg1_epu32(msg[g & 3], msg[(g + 1) & 3]), w_minus7);
        msg[g & 3] = _mm_sha256msg2_epu32(partial, msg[(g + 3) & 3]);
      }
      __m128i wk = _mm_add_epi32(msg[g & 3],
                                 _mm_load_si128(reinterpret_cast<const __m128i*>(kRoundK + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds 4g, 4g+1
      wk = _mm_shuffle_epi32(wk, 0x0E);              // the upper two W+K into the low lanes
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // rounds 4g+2, 4g+3
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  // Back to {a,b,c,d}, {e,f,g,h}.
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  abcd = _mm_blend_epi16(feba, dchg, 0xF0);
  efgh = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), abcd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), efgh);
}

bool ProbeShaNi() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d) || a < 7) return false;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool sse41 = (c >> 19) & 1;
  const bool ssse3 = (c >> 9) & 1;
  __cpuid_count(7, 0, a, b, c, d);
  const bool sha = (b >> 29) & 1;
  return sha && sse41 && ssse3;
}

Sha256Impl Resolve(Sha256Impl impl) {
  return impl == Sha256Impl::kAuto ? Sha256DefaultImpl() : impl;
}

}  // namespace

bool Sha256ShaNiAvailable() {
  static const bool available = ProbeShaNi();
  return available;
}

Sha256Impl Sha256DefaultImpl() {
  static const Sha256Impl impl = [] {
    const char* env = std::getenv("KAIROX_SHA256");
    if (env != nullptr && std::strcmp(env, "portable") == 0) return Sha256Impl::kPortable;
    return Sha256ShaNiAvailable() ? Sha256Impl::kShaNi : Sha256Impl::kPortable;
  }();
  return impl;
}

const char* Sha256ImplName(Sha256Impl impl) {
  switch (impl) {
    case Sha256Impl::kAuto:
      return "auto";
    case Sha256Impl::kPortable:
      return "portable";
    case Sha256Impl::kShaNi:
      return "sha-ni";
  }
  return "?";
}

Sha256::Sha256(Sha256Impl impl) : impl_(Resolve(impl)) {
  KX_CHECK_MSG(impl_ != Sha256Impl::kShaNi || Sha256ShaNiAvailable(),
               "Sha256Impl::kShaNi requested on a CPU without the SHA extensions");
  compress_ = impl_ == Sha256Impl::kShaNi ? &CompressShaNi : &CompressPortable;
  Reset();
}

void Sha256::Reset() {
  std::memcpy(state_, kInitialState, sizeof(state_));
  buffered_ = 0;
  total_bytes_ = 0;
  finished_ = false;
}

void Sha256::Update(const void* data, size_t size) {
  KX_CHECK_MSG(!finished_, "Sha256::Update after Finish (call Reset first)");
  const auto* src = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, kBlockBytes - buffered_);
    std::memcpy(buffer_ + buffered_, src, take);
    buffered_ += take;
    src += take;
    size -= take;
    if (buffered_ < kBlockBytes) return;
    compress_(state_, buffer_, 1);
    buffered_ = 0;
  }
  // Whole blocks straight from the caller's memory: no copy on the fast path.
  const size_t n_blocks = size / kBlockBytes;
  if (n_blocks > 0) {
    compress_(state_, src, n_blocks);
    src += n_blocks * kBlockBytes;
    size -= n_blocks * kBlockBytes;
  }
  if (size > 0) {
    std::memcpy(buffer_, src, size);
    buffered_ = size;
  }
}

std::array<uint8_t, Sha256::kDigestBytes> Sha256::Finish() {
  KX_CHECK_MSG(!finished_, "Sha256::Finish called twice (call Reset first)");
  // Padding (§5.1.1): a 1 bit, zeros, then the message length in bits as a
  // big-endian 64-bit number, ending on a block boundary.
  const uint64_t bit_length = total_bytes_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > kBlockBytes - kLengthBytes) {
    std::memset(buffer_ + buffered_, 0, kBlockBytes - buffered_);
    compress_(state_, buffer_, 1);
    buffered_ = 0;
  }
  std::memset(buffer_ + buffered_, 0, kBlockBytes - kLengthBytes - buffered_);
  for (size_t i = 0; i < kLengthBytes; ++i) {
    buffer_[kBlockBytes - 1 - i] = static_cast<uint8_t>(bit_length >> (8 * i));
  }
  compress_(state_, buffer_, 1);
  finished_ = true;

  std::array<uint8_t, kDigestBytes> digest;
  for (int i = 0; i < 8; ++i) {
    digest[4 * i + 0] = static_cast<uint8_t>(state_[i] >> 24);
    digest[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    digest[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    digest[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  return digest;
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

std::string Sha256Hex(const void* data, size_t size, Sha256Impl impl) {
  Sha256 h(impl);
  h.Update(data, size);
  return DigestHex(h.Finish());
}

}  // namespace kx
