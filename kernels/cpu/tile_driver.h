// Walks a rows × columns product in register tiles. An ISA's kernel provides
//   template <int R, int C> static void Tile(const TileArgs&, int64_t r0, int64_t c0)
// computing y[(c0+c)·ldy + r0+r] for r < R, c < C; the driver covers the edges
// with smaller tiles, so every row is computed by the same per-row code
// whatever the tiling (thread splits do not change results).
//
// Order: row tiles outermost, so each weight row comes from DRAM once and is
// reused from L1 for every column tile (matmul), while the activations stay
// in L2.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/kernels.h"

namespace kx::cpu {

struct TileArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t n;
  const uint8_t* act;
  size_t act_stride;
  float* y;
  int64_t ldy;
  // Optional: activations already rearranged by the kernel for its inner
  // loop (column c at prep + c·prep_stride), in the caller's stack scratch.
  const uint8_t* prep = nullptr;
  size_t prep_stride = 0;
  // Add to y instead of writing it (kernels that split n into chunks).
  bool accumulate = false;
};

template <class K, int kR, int kC>
class TileDriver {
 public:
  static void Run(const TileArgs& a, int64_t rows, int64_t ncols) {
    for (int64_t r0 = 0; r0 < rows; r0 += kR) {
      const int rr = static_cast<int>(rows - r0 < kR ? rows - r0 : kR);
      for (int64_t c0 = 0; c0 < ncols; c0 += kC) {
        const int cc = static_cast<int>(ncols - c0 < kC ? ncols - c0 : kC);
        kTable[rr - 1][cc - 1](a, r0, c0);
      }
    }
  }

 private:
  using Fn = void (*)(const TileArgs&, int64_t, int64_t);
  template <size_t... Rs, size_t... Cs>
  static constexpr auto MakeTable(std::index_sequence<Rs...>, std::index_sequence<Cs...> cs) {
    return std::array<std::array<Fn, kC>, kR>{MakeRow<Rs>(cs)...};
  }
  template <size_t R, size_t... Cs>
  static constexpr std::array<Fn, kC> MakeRow(std::index_sequence<Cs...>) {
    return {&K::template Tile<static_cast<int>(R) + 1, static_cast<int>(Cs) + 1>...};
  }
  static constexpr std::array<std::array<Fn, kC>, kR> kTable =
      MakeTable(std::make_index_sequence<kR>{}, std::make_index_sequence<kC>{});
};

// The TypeKernels entry points over a TileDriver: matvec is the one-column
// case of matmul.
template <class K, int kMatvecRows, int kMatmulRows, int kMatmulCols>
struct TiledEntryPoints {
  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    const TileArgs a{
        static_cast<const uint8_t*>(w), row_bytes, n, static_cast<const uint8_t*>(act), 0, y, 0};
    TileDriver<K, kMatvecRows, 1>::Run(a, rows, 1);
  }
  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const TileArgs a{static_cast<const uint8_t*>(w),
                     row_bytes,
                     n,
                     static_cast<const uint8_t*>(act),
                     act_stride,
                     y,
                     ldy};
    TileDriver<K, kMatmulRows, kMatmulCols>::Run(a, rows, ncols);
  }
};

}  // namespace kx::cpu

namespace kx::cpu {

// Entry points for kernels whose activations are rearranged per super-block
// of 256 elements (T::Prepare(act, Prep*), T::Prep; K: the tiles, reading
// TileArgs::prep with prep_stride bytes per column). n is split into chunks
// of kChunkSb super-blocks, reduced into y in turn (accumulate), the same in
// matvec and matmul, so matmul's columns equal matvec's bit for bit; each
// chunk's activations are prepared once (matvec: one column; matmul: panels
// of columns, kPrepBytes of stack at most) and read by every row tile.
template <class T, class K, int64_t kChunkSb, size_t kPrepBytes, int kMatvecRows, int kMatmulRows,
          int kMatmulCols>
struct ChunkedPrepEntry {
  using Prep = typename T::Prep;
  static constexpr int64_t kSbElems = 256;
  static constexpr size_t kSbActBytes = 8 * sizeof(BlockQ16A);
  static_assert(kChunkSb * sizeof(Prep) <= kPrepBytes);

  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    Matmul(w, row_bytes, n, rows, act, 0, 1, y, 0);
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(act);
    const int64_t nsb = n / kSbElems;
    alignas(64) uint8_t scratch[kPrepBytes];
    for (int64_t s0 = 0; s0 == 0 || s0 < nsb; s0 += kChunkSb) {  // n = 0: y = 0
      const int64_t ns = nsb - s0 < kChunkSb ? nsb - s0 : kChunkSb;
      const size_t col_bytes = static_cast<size_t>(ns > 0 ? ns : 1) * sizeof(Prep);
      int64_t panel = static_cast<int64_t>(kPrepBytes / col_bytes);
      if (ncols > 1 && panel >= kMatmulCols) panel -= panel % kMatmulCols;  // whole tiles
      for (int64_t c0 = 0; c0 < ncols; c0 += panel) {
        const int64_t pc = ncols - c0 < panel ? ncols - c0 : panel;
        const uint8_t* a = ap + c0 * act_stride + s0 * kSbActBytes;
        for (int64_t c = 0; c < pc; ++c) {
          auto* dst = reinterpret_cast<Prep*>(scratch + c * col_bytes);
          for (int64_t s = 0; s < ns; ++s)
            T::Prepare(a + c * act_stride + s * kSbActBytes, dst + s);
        }
        TileArgs t{
            wp + s0 * T::kBlockBytes, row_bytes, ns * kSbElems, a, act_stride, y + c0 * ldy, ldy};
        t.prep = scratch;
        t.prep_stride = col_bytes;
        t.accumulate = s0 > 0;
        if (ncols == 1) {
          TileDriver<K, kMatvecRows, 1>::Run(t, rows, 1);
        } else {
          TileDriver<K, kMatmulRows, kMatmulCols>::Run(t, rows, pc);
        }
      }
    }
  }
};

}  // namespace kx::cpu
