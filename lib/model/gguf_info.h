// Human-readable description of a GGUF file (kairox-cli --info).
#pragma once

#include <string>

#include "model/gguf.h"

namespace kx {

// Header line, every metadata key with an abbreviated value (long strings
// cut, arrays as "[string × 49152] ..."), the tensor table (name, type, shape,
// bytes, offset; only the first few unless `all_tensors`), and a summary of
// tensor count and bytes per type.
std::string DescribeGguf(const GgufFile& f, bool all_tensors);

}  // namespace kx
