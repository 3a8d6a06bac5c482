// Memory sizes as users type them on a command line or in a config:
// `--vram-budget 2G`, `--ram-budget 512MiB`, `--cache 50%`.
//
// Units are binary and case-insensitive: K/KB/KiB = 2^10, M/MB/MiB = 2^20,
// G/GB/GiB = 2^30, T/TB/TiB = 2^40; a bare number or `B` is bytes. "GB" means
// GiB on purpose: memory budgets are compared with what allocators and GPU
// tools report, which are binary (nvidia-smi's "MiB", PowerInfer's
// --vram-budget in GiB), and a user writing 2GB for a budget means 2 GiB.
// Fractions are allowed with a unit (`1.5G` = 1610612736) and rounded to the
// nearest byte; a bare number must be a whole number of bytes.
//
// Percentages (`50%`, `12.5%`) must be in (0, 100]: a share of a whole larger
// than the whole is a mistake, not a request. `0` bytes is how to ask for
// nothing.
//
//   KX_ASSIGN_OR_RETURN(kx::SizeSpec spec, kx::ParseSize(flag));
//   const uint64_t budget = kx::ResolveSize(spec, free_vram_bytes);
//   kx::Log()->info("budget {}", kx::FormatBytes(budget));   // "1.5 GiB"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kx {

struct SizeSpec {
  bool is_percent = false;
  uint64_t bytes = 0;    // when !is_percent
  double percent = 0.0;  // when is_percent, in (0, 100]
};

// Parses a size; surrounding whitespace is ignored, whitespace between the
// number and the unit is allowed ("512 MiB"). InvalidArgument (naming the
// input and the problem) for empty input, a sign, garbage, an unknown unit,
// a fractional byte count, a percentage out of range, or a value above
// UINT64_MAX bytes.
absl::StatusOr<SizeSpec> ParseSize(std::string_view text);

// Bytes a spec stands for: `bytes`, or floor(percent% of `whole`).
uint64_t ResolveSize(const SizeSpec& spec, uint64_t whole);
// The name the brief asked for; same as ResolveSize.
inline uint64_t Resolve(const SizeSpec& spec, uint64_t whole) { return ResolveSize(spec, whole); }

// Human-readable size with binary units and one decimal: "512 B", "1.0 KiB",
// "97.9 MiB", "16.0 EiB". Values below 1 KiB are exact.
std::string FormatBytes(uint64_t bytes);

// The spec as text a user could pass back: "2147483648" or "50%".
std::string FormatSizeSpec(const SizeSpec& spec);

}  // namespace kx
