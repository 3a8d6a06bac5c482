#include "base/memory_budget.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/size_parse.h"

namespace kx {

absl::Status MemoryBudget::Reserve(std::string_view what, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > limit_ - used_) {  // no overflow: used_ <= limit_ always
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget exceeded: ", std::string(what), " needs ", FormatBytes(bytes), " but ",
        FormatBytes(used_), " of the ", FormatBytes(limit_), " budget is already held (",
        FormatBytes(limit_ - used_), " left)"));
  }
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  for (auto& [name, held] : entries_) {
    if (name == what) {
      held += bytes;
      return absl::OkStatus();
    }
  }
  entries_.emplace_back(std::string(what), bytes);
  return absl::OkStatus();
}

void MemoryBudget::Release(std::string_view what, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, held] : entries_) {
    if (name == what) {
      KX_CHECK_MSG(held >= bytes, "MemoryBudget::Release: more than was reserved");
      held -= bytes;
      used_ -= bytes;
      return;
    }
  }
  KX_CHECK_MSG(bytes == 0, "MemoryBudget::Release: nothing reserved under this name");
}

absl::Status MemoryBudget::SetLimit(uint64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (used_ > limit) {
    return absl::FailedPreconditionError(absl::StrCat("memory budget: ", FormatBytes(used_),
                                                      " held exceeds the new limit ",
                                                      FormatBytes(limit)));
  }
  limit_ = limit;
  return absl::OkStatus();
}

uint64_t MemoryBudget::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

uint64_t MemoryBudget::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

uint64_t MemoryBudget::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

uint64_t MemoryBudget::held(std::string_view what) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, held] : entries_) {
    if (name == what) return held;
  }
  return 0;
}

std::vector<std::pair<std::string, uint64_t>> MemoryBudget::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& e : entries_) {
    if (e.second != 0) out.push_back(e);
  }
  return out;
}

std::string MemoryBudget::Report() const {
  std::string s;
  for (const auto& [name, held] : entries()) {
    absl::StrAppend(&s, s.empty() ? "" : ", ", name, " ", FormatBytes(held));
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::StrAppend(&s, " = ", FormatBytes(used_), " of ",
                  limit_ == kUnlimited ? std::string("no limit") : FormatBytes(limit_));
  return s;
}

}  // namespace kx
