// Quantizers for the tiny test models' Q4_0, Q5_0, Q5_1 and K-quant weights,
// written from the block layouts (kernels/cpu/legacy_quants.h, kquants.h).
// Simple round-to-nearest with max-based scales: the engine test compares
// against the values the file holds (dequantized), so quantization quality
// only needs to be sane, not llama.cpp's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/tiny_model.h"
#include "kernels/cpu/kernels.h"

namespace kx::test {
namespace {

constexpr int kQK = 32;
constexpr int kQK_K = 256;

void PutHalfAt(uint8_t* p, float v) {
  const uint16_t h = cpu::FloatToHalf(v);
  std::memcpy(p, &h, sizeof h);
}
float Stored(float v) { return cpu::HalfToFloat(cpu::FloatToHalf(v)); }

int RoundClamp(float v, int lo, int hi) {
  if (!std::isfinite(v)) return lo;
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

// x ≈ d·(q − offset) with q in 0..qmax (symmetric types) or d·q + m (min types).
void Legacy(const float* x, int qmax, bool with_min, uint8_t* out, int qh_at, int qs_at) {
  float lo = x[0], hi = x[0], amax_signed = x[0];
  for (int i = 0; i < kQK; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    if (std::fabs(x[i]) > std::fabs(amax_signed)) amax_signed = x[i];
  }
  const int offset = with_min ? 0 : (qmax + 1) / 2;
  const float d = with_min ? (hi - lo) / static_cast<float>(qmax) : amax_signed / -offset;
  PutHalfAt(out, d);
  if (with_min) PutHalfAt(out + 2, lo);
  const float ds = Stored(d), ms = with_min ? Stored(lo) : 0.0f;
  uint32_t qh = 0;
  uint8_t* qs = out + qs_at;
  std::memset(qs, 0, kQK / 2);
  for (int i = 0; i < kQK; ++i) {
    const int q =
        ds != 0 ? RoundClamp((x[i] - ms) / ds + static_cast<float>(offset), 0, qmax) : offset;
    qs[i % 16] |= static_cast<uint8_t>((q & 0x0f) << (i < 16 ? 0 : 4));
    qh |= static_cast<uint32_t>((q >> 4) & 1) << i;
  }
  if (qh_at >= 0) std::memcpy(out + qh_at, &qh, sizeof qh);  // little-endian host
}

// A K-quant super-block as integers: w ≈ d·sc[k]·q[e] − dmin·m[k], sub-block
// k of `sub` elements; q in qlo..qhi, sc in sclo..schi, m in 0..mmax (no min
// when mmax = 0).
struct KInts {
  float d = 0, dmin = 0;
  int sc[16] = {}, m[16] = {}, q[kQK_K] = {};
};

KInts QuantizeK(const float* x, int sub, int qlo, int qhi, int sclo, int schi, int mmax) {
  const int nsub = kQK_K / sub;
  float scale[16], mn[16];
  for (int k = 0; k < nsub; ++k) {
    const float* xs = x + k * sub;
    float lo = 0, hi = 0, amax_signed = 0;
    for (int i = 0; i < sub; ++i) {
      lo = std::min(lo, xs[i]);
      hi = std::max(hi, xs[i]);
      if (std::fabs(xs[i]) > std::fabs(amax_signed)) amax_signed = xs[i];
    }
    if (mmax > 0) {  // q ≥ 0: x ≈ scale·q − mn
      scale[k] = (hi - lo) / static_cast<float>(qhi);
      mn[k] = -lo;
    } else {  // signed q: the largest |x| maps to qlo (one more level that way)
      scale[k] = amax_signed / static_cast<float>(qlo);
      mn[k] = 0;
    }
  }
  KInts r;
  float smax = 0, mnmax = 0;
  for (int k = 0; k < nsub; ++k) {
    smax = std::max(smax, std::fabs(scale[k]));
    mnmax = std::max(mnmax, mn[k]);
  }
  const int sc_lim = std::max(std::abs(sclo), schi);
  r.d = Stored(smax / static_cast<float>(sc_lim));
  r.dmin = mmax > 0 ? Stored(mnmax / static_cast<float>(mmax)) : 0.0f;
  for (int k = 0; k < nsub; ++k) {
    r.sc[k] = r.d != 0 ? RoundClamp(scale[k] / r.d, sclo, schi) : 0;
    r.m[k] = r.dmin != 0 ? RoundClamp(mn[k] / r.dmin, 0, mmax) : 0;
    const float step = r.d * static_cast<float>(r.sc[k]);
    const float shift = r.dmin * static_cast<float>(r.m[k]);
    for (int i = 0; i < sub; ++i) {
      const float v = x[k * sub + i];
      r.q[k * sub + i] = step != 0 ? RoundClamp((v + shift) / step, qlo, qhi) : std::max(qlo, 0);
    }
  }
  return r;
}

// Q4_K / Q5_K 6-bit scale packing (the inverse of kq::ScaleMin6).
void PackScaleMin6(const KInts& k, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((k.sc[j] & 63) | ((k.sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((k.m[j] & 63) | ((k.m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((k.sc[j + 4] & 0x0f) | ((k.m[j + 4] & 0x0f) << 4));
  }
}

void PackK(GgmlType type, const float* x, uint8_t* out) {
  switch (type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const KInts k = QuantizeK(x, 32, 0, five ? 31 : 15, 0, 63, 63);
      PutHalfAt(out, k.d);
      PutHalfAt(out + 2, k.dmin);
      PackScaleMin6(k, out + 4);
      uint8_t* qh = out + 16;
      uint8_t* qs = out + (five ? 48 : 16);
      std::memset(out + 16, 0, five ? 160 : 128);
      for (int e = 0; e < kQK_K; ++e) {
        qs[(e / 64) * 32 + e % 32] |= static_cast<uint8_t>((k.q[e] & 0x0f) << (4 * ((e / 32) % 2)));
        if (five) qh[e % 32] |= static_cast<uint8_t>(((k.q[e] >> 4) & 1) << (e / 32));
      }
      break;
    }
    case GgmlType::kQ6_K: {
      const KInts k = QuantizeK(x, 16, -32, 31, -128, 127, 0);
      std::memset(out, 0, 192);
      for (int e = 0; e < kQK_K; ++e) {
        const int u = k.q[e] + 32, h = e / 128, r = e % 128;
        out[64 * h + r % 64] |= static_cast<uint8_t>((u & 0x0f) << (4 * (r / 64)));
        out[128 + 32 * h + r % 32] |= static_cast<uint8_t>((u >> 4) << (2 * (r / 32)));
      }
      for (int j = 0; j < 16; ++j)
        out[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(k.sc[j]));
      PutHalfAt(out + 208, k.d);
      break;
    }
    case GgmlType::kQ3_K: {
      const KInts k = QuantizeK(x, 16, -4, 3, -32, 31, 0);
      std::memset(out, 0, 108);
      for (int e = 0; e < kQK_K; ++e) {
        const int u = k.q[e] + 4, h = e / 128, s = (e % 128) / 32, l = e % 32;
        out[32 + 32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * s));
        out[l] |= static_cast<uint8_t>((u >> 2) << (e / 32));  // set: no −4
      }
      for (int j = 0; j < 16; ++j) {
        const int u = k.sc[j] + 32;
        out[96 + j % 8] |= static_cast<uint8_t>((u & 0x0f) << (4 * (j / 8)));
        out[96 + 8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
      }
      PutHalfAt(out + 108, k.d);
      break;
    }
    case GgmlType::kQ2_K: {
      const KInts k = QuantizeK(x, 16, 0, 3, 0, 15, 15);
      std::memset(out, 0, 80);
      for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(k.sc[j] | (k.m[j] << 4));
      for (int e = 0; e < kQK_K; ++e) {
        out[16 + 32 * (e / 128) + e % 32] |= static_cast<uint8_t>(k.q[e] << (2 * ((e % 128) / 32)));
      }
      PutHalfAt(out + 80, k.d);
      PutHalfAt(out + 82, k.dmin);
      break;
    }
    default:
      break;
  }
}

}  // namespace

std::vector<uint8_t> QuantizeRowIssue3(GgmlType type, const std::vector<float>& src) {
  const TypeInfo& info = GetTypeInfo(type);
  const size_t nb = src.size() / static_cast<size_t>(info.block_size);
  std::vector<uint8_t> out(nb * static_cast<size_t>(info.block_bytes));
  for (size_t b = 0; b < nb; ++b) {
    const float* x = src.data() + b * info.block_size;
    uint8_t* o = out.data() + b * info.block_bytes;
    switch (type) {
      case GgmlType::kQ4_0:
        Legacy(x, 15, false, o, -1, 2);
        break;
      case GgmlType::kQ5_0:
        Legacy(x, 31, false, o, 2, 6);
        break;
      case GgmlType::kQ5_1:
        Legacy(x, 31, true, o, 4, 8);
        break;
      default:
        PackK(type, x, o);
        break;
    }
  }
  return out;
}

}  // namespace kx::test
