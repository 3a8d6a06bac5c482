// Residency bookkeeping (see residency.h).
#include "policy/residency.h"

namespace kx::policy {

Residency::Residency(int n_layer, int n_groups, int slots_per_layer)
    : Residency(n_groups, std::vector<int>(n_layer > 0 ? n_layer : 0, slots_per_layer)) {
  KX_CHECK(n_layer >= 0);
}

Residency::Residency(int n_groups, const std::vector<int>& capacities)
    : n_layer_(static_cast<int>(capacities.size())), n_groups_(n_groups) {
  KX_CHECK(n_groups >= 0);
  slot_base_.assign(n_layer_ + 1, 0);
  for (int l = 0; l < n_layer_; ++l) {
    KX_CHECK_MSG(capacities[l] >= 0 && capacities[l] <= n_groups,
                 "a layer's slot count must be within 0..n_groups");
    slot_base_[l + 1] = slot_base_[l] + capacities[l];
  }
  const int total_slots = slot_base_[n_layer_];
  group_slot_.assign(static_cast<size_t>(n_layer_) * n_groups_, -1);
  slot_group_.assign(total_slots, -1);
  slot_state_.assign(total_slots, SlotState::kFree);
  slot_pins_.assign(total_slots, 0);
  free_stack_.resize(total_slots);
  free_pos_.resize(total_slots);
  free_count_.resize(n_layer_);
  resident_count_.assign(n_layer_, 0);
  loading_count_.assign(n_layer_, 0);
  for (int l = 0; l < n_layer_; ++l) {
    const int cap = capacity(l);
    // Highest slot at the bottom, so a fresh layer hands out slot 0 first.
    for (int i = 0; i < cap; ++i) {
      const int slot = cap - 1 - i;
      free_stack_[slot_base_[l] + i] = slot;
      free_pos_[slot_base_[l] + slot] = i;
    }
    free_count_[l] = cap;
  }
  DebugCheck();
}

int Residency::free_slot(int layer) const {
  KX_CHECK(layer >= 0 && layer < n_layer_);
  const int n = free_count_[layer];
  return n > 0 ? free_stack_[slot_base_[layer] + n - 1] : -1;
}

void Residency::RemoveFromFreeList(int layer, int slot) {
  const int base = slot_base_[layer];
  const int pos = free_pos_[base + slot];
  KX_CHECK_MSG(pos >= 0, "slot is not free");
  const int last = free_count_[layer] - 1;
  const int moved = free_stack_[base + last];  // swap-remove keeps it O(1)
  free_stack_[base + pos] = moved;
  free_pos_[base + moved] = pos;
  free_pos_[base + slot] = -1;
  free_count_[layer] = last;
}

void Residency::PushFreeList(int layer, int slot) {
  const int base = slot_base_[layer];
  const int n = free_count_[layer];
  free_stack_[base + n] = slot;
  free_pos_[base + slot] = n;
  free_count_[layer] = n + 1;
}

void Residency::BeginLoad(int layer, int group, int slot) {
  const int gi = GroupIndex(layer, group);
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(group_slot_[gi] < 0, "BeginLoad of a group that is already loading or resident");
  KX_CHECK_MSG(slot_state_[si] == SlotState::kFree, "BeginLoad into a slot that is not free");
  RemoveFromFreeList(layer, slot);
  group_slot_[gi] = slot;
  slot_group_[si] = group;
  slot_state_[si] = SlotState::kLoading;
  ++loading_count_[layer];
  DebugCheck();
}

void Residency::CompleteLoad(int layer, int group) {
  const int slot = group_slot_[GroupIndex(layer, group)];
  KX_CHECK_MSG(slot >= 0, "CompleteLoad of a group that is not loading");
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(slot_state_[si] == SlotState::kLoading, "CompleteLoad of a resident group");
  slot_state_[si] = SlotState::kResident;
  --loading_count_[layer];
  ++resident_count_[layer];
  DebugCheck();
}

void Residency::CancelLoad(int layer, int group) {
  const int gi = GroupIndex(layer, group);
  const int slot = group_slot_[gi];
  KX_CHECK_MSG(slot >= 0, "CancelLoad of a group that is not loading");
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(slot_state_[si] == SlotState::kLoading, "CancelLoad of a resident group");
  group_slot_[gi] = -1;
  slot_group_[si] = -1;
  slot_state_[si] = SlotState::kFree;
  --loading_count_[layer];
  PushFreeList(layer, slot);
  DebugCheck();
}

void Residency::Evict(int layer, int group) {
  const int gi = GroupIndex(layer, group);
  const int slot = group_slot_[gi];
  KX_CHECK_MSG(slot >= 0, "Evict of a group that is not resident");
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(slot_state_[si] == SlotState::kResident,
               "Evict of a group whose read is still in flight");
  KX_CHECK_MSG(slot_pins_[si] == 0, "Evict of a pinned slot (a reader is still using it)");
  group_slot_[gi] = -1;
  slot_group_[si] = -1;
  slot_state_[si] = SlotState::kFree;
  --resident_count_[layer];
  PushFreeList(layer, slot);
  DebugCheck();
}

void Residency::Pin(int layer, int slot) {
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(slot_state_[si] == SlotState::kResident, "Pin of a slot that is not resident");
  ++slot_pins_[si];
}

void Residency::Unpin(int layer, int slot) {
  const int si = SlotIndex(layer, slot);
  KX_CHECK_MSG(slot_pins_[si] > 0, "Unpin of a slot that is not pinned");
  --slot_pins_[si];
}

void Residency::CheckInvariants() const {
  KX_CHECK(static_cast<int>(slot_base_.size()) == n_layer_ + 1);
  for (int l = 0; l < n_layer_; ++l) {
    const int base = slot_base_[l];
    const int cap = capacity(l);
    int resident = 0, loading = 0, free_slots = 0;
    for (int s = 0; s < cap; ++s) {
      const int g = slot_group_[base + s];
      switch (slot_state_[base + s]) {
        case SlotState::kFree:
          KX_CHECK_MSG(g == -1, "a free slot names a group");
          KX_CHECK_MSG(slot_pins_[base + s] == 0, "a free slot is pinned");
          KX_CHECK_MSG(free_pos_[base + s] >= 0 && free_pos_[base + s] < free_count_[l] &&
                           free_stack_[base + free_pos_[base + s]] == s,
                       "a free slot is missing from the free list");
          ++free_slots;
          break;
        case SlotState::kLoading:
        case SlotState::kResident:
          KX_CHECK_MSG(g >= 0 && g < n_groups_, "an occupied slot names no valid group");
          KX_CHECK_MSG(group_slot_[l * n_groups_ + g] == s, "slot→group→slot is not the identity");
          KX_CHECK_MSG(free_pos_[base + s] == -1, "an occupied slot is on the free list");
          if (slot_state_[base + s] == SlotState::kLoading) {
            KX_CHECK_MSG(slot_pins_[base + s] == 0, "a loading slot is pinned");
            ++loading;
          } else {
            ++resident;
          }
          break;
      }
    }
    int mapped = 0;
    for (int g = 0; g < n_groups_; ++g) {
      const int s = group_slot_[l * n_groups_ + g];
      if (s < 0) continue;
      KX_CHECK_MSG(s < cap && slot_group_[base + s] == g, "group→slot→group is not the identity");
      ++mapped;
    }
    KX_CHECK_MSG(resident == resident_count_[l], "resident count drifted");
    KX_CHECK_MSG(loading == loading_count_[l], "loading count drifted");
    KX_CHECK_MSG(free_slots == free_count_[l], "free count drifted");
    KX_CHECK_MSG(mapped == resident + loading, "groups mapped ≠ occupied slots");
    KX_CHECK_MSG(resident + loading + free_slots == cap, "slots do not add up to the capacity");
  }
}

}  // namespace kx::policy
