// Error handling: absl::Status / absl::StatusOr inside the library, and the
// macros that propagate them. Errors are values; nothing here throws.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#define KX_CONCAT_INNER(a, b) a##b
#define KX_CONCAT(a, b) KX_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define KX_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status kx_status_tmp_ = (expr);       \
    if (!kx_status_tmp_.ok()) return kx_status_tmp_; \
  } while (0)

// `KX_ASSIGN_OR_RETURN(auto x, MakeX());` declares x or returns the error.
#define KX_ASSIGN_OR_RETURN(lhs, expr) \
  KX_ASSIGN_OR_RETURN_IMPL(KX_CONCAT(kx_statusor_, __LINE__), lhs, expr)
#define KX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
