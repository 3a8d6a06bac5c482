// Tiny llama, Mistral (llama-architecture) and Qwen2 models against Hugging
// Face transformers reading the very same GGUF bytes: tests/golden/
// make_arch_reference.py wrote the models with kx_write_arch_model, recorded
// their sha256 and transformers' teacher-forced logits in tests/golden/arch/.
// This test writes each model again from the same spec, checks it is
// byte-identical (sha256), and compares kairox's logits. What it pins down is
// the Q/K layout: transformers un-permutes llama's Q/K rows and uses rotate-
// half RoPE, so kairox's adjacent-pair RoPE must agree with that; qwen2 files
// are not permuted, so kairox must rotate NeoX halves and add the biases.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace {

// Float32 kernels differ from PyTorch's only by summation order and the F16
// KV cache (relative 2^-11), so agreement is far tighter than the 0.999
// cosine the brief asks for; a wrong RoPE pairing or a missing bias gives
// cosines well below 0.99 on these models.
constexpr double kMinCosine = 0.999;
// Measured (scalar, AVX2 and AVX-512 alike): max |logit − reference| 0.0096
// (llama, logits up to ±68), 0.0063 (qwen2), 0.0012 (mistral). Five times
// the worst, asserted on every logit.
constexpr double kMaxAbsError = 0.05;

std::string GoldenDir() { return kx::test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/arch"; }

// SHA-256 (FIPS 180-4), enough to identify a file; checked against a known
// answer below.
class Sha256 {
 public:
  void Update(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      block_[fill_++] = p[i];
      if (fill_ == 64) Compress();
    }
    bits_ += 8ull * n;
  }
  std::string HexDigest() {
    const uint64_t bits = bits_;
    const uint8_t one = 0x80, zero = 0;
    Update(&one, 1);
    while (fill_ != 56) Update(&zero, 1);
    for (int i = 7; i >= 0; --i) {
      const uint8_t b = static_cast<uint8_t>(bits >> (8 * i));
      Update(&b, 1);
    }
    std::string hex;
    char buf[9];
    for (uint32_t v : h_) {
      std::snprintf(buf, sizeof(buf), "%08x", v);
      hex += buf;
    }
    return hex;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void Compress() {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{block_[4 * i]} << 24) | (uint32_t{block_[4 * i + 1]} << 16) |
             (uint32_t{block_[4 * i + 2]} << 8) | block_[4 * i + 3];
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::array<uint32_t, 8> v = h_;
    for (int i = 0; i < 64; ++i) {
      const uint32_t s1 = Rotr(v[4], 6) ^ Rotr(v[4], 11) ^ Rotr(v[4], 25);
      const uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      const uint32_t t1 = v[7] + s1 + ch + k[i] + w[i];
      const uint32_t s0 = Rotr(v[0], 2) ^ Rotr(v[0], 13) ^ Rotr(v[0], 22);
      const uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      const uint32_t t2 = s0 + maj;
      v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
    }
    for (int i = 0; i < 8; ++i) h_[i] += v[i];
    fill_ = 0;
  }

  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  int fill_ = 0;
  uint64_t bits_ = 0;
};

std::string FileSha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.HexDigest();
}

double Cosine(std::span<const float> a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("the test's SHA-256 gives the FIPS 180-4 known answers") {
  Sha256 abc;
  abc.Update(reinterpret_cast<const uint8_t*>("abc"), 3);
  CHECK(abc.HexDigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 h;
  h.Update(reinterpret_cast<const uint8_t*>(two_blocks.data()), two_blocks.size());
  CHECK(h.HexDigest() == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("llama, Mistral and Qwen2 tiny models match transformers' logits") {
  std::ifstream meta_in(GoldenDir() + "/arch.json");
  REQUIRE(meta_in.good());
  const nlohmann::json meta = nlohmann::json::parse(meta_in);
  const std::vector<int32_t> tokens = meta.at("token_ids").get<std::vector<int32_t>>();
  REQUIRE(!tokens.empty());
  for (const std::string& variant : kx::test::ArchGoldenVariants()) {
    DYNAMIC_SECTION(variant) {
      const nlohmann::json& g = meta.at("models").at(variant);
      const int n_vocab = g.at("n_vocab").get<int>();
      std::ifstream bin(GoldenDir() + "/" + g.at("logits_file").get<std::string>(),
                        std::ios::binary);
      REQUIRE(bin.good());
      std::vector<float> want(tokens.size() * n_vocab);
      bin.read(reinterpret_cast<char*>(want.data()),
               static_cast<std::streamsize>(want.size() * sizeof(float)));
      REQUIRE(bin.gcount() == static_cast<std::streamsize>(want.size() * sizeof(float)));

      const std::string path =
          "/tmp/kx_test_arch_" + variant + "_" + std::to_string(::getpid()) + ".gguf";
      const kx::test::TinyModelSpec spec = kx::test::ArchGoldenSpec(variant);
      REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
      const std::string sha = FileSha256(path);
      INFO("written model sha256 " << sha << "; golden " << g.at("sha256").get<std::string>()
                                   << " (if the writer changed on purpose, rerun "
                                      "tests/golden/make_arch_reference.py)");
      REQUIRE(sha == g.at("sha256").get<std::string>());

      kx::EngineOptions opts;
      opts.n_threads = 2;
      auto engine = kx::Engine::Load(path, opts);
      ::unlink(path.c_str());
      INFO(engine.status().message());
      REQUIRE(engine.ok());
      REQUIRE((*engine)->Eval(tokens, /*all_logits=*/true).ok());
      double worst_cos = 1.0, worst_abs = 0.0;
      for (size_t i = 0; i < tokens.size(); ++i) {
        auto got = (*engine)->Logits(static_cast<int>(i));
        REQUIRE(got.size() == static_cast<size_t>(n_vocab));
        const float* ref = &want[i * n_vocab];
        const double cos = Cosine(got, ref, n_vocab);
        double pos_abs = 0.0;
        for (int j = 0; j < n_vocab; ++j) {
          pos_abs = std::max(pos_abs, std::fabs(static_cast<double>(got[j]) - ref[j]));
        }
        worst_abs = std::max(worst_abs, pos_abs);
        worst_cos = std::min(worst_cos, cos);
        INFO("position " << i << " cosine " << cos << " max |error| " << pos_abs);
        CHECK(cos >= kMinCosine);
        CHECK(pos_abs <= kMaxAbsError);
      }
      std::printf("%s: worst cosine %.8f, max |logit error| %.6f over %zu positions\n",
                  variant.c_str(), worst_cos, worst_abs, tokens.size());
    }
  }
}
