// Residency: per layer, which neuron-group bundles occupy the K slots of the
// fast tier (RAM under a disk budget; later the GPU), plus the inverse map.
// It is the only truth of what is where; policies read it, the engine and the
// simulator mutate it.
//
// A slot is free, loading(group) (a read into it is in flight: reserved, not
// readable) or resident(group). Readers pin resident slots while they read
// them; evicting a pinned slot is a bug (KX_CHECK). Every operation is O(1)
// and nothing allocates after construction. Debug builds (no NDEBUG) run
// CheckInvariants() after every mutation.
//
// Usage:
//   kx::policy::Residency r(/*n_layer=*/30, /*n_groups=*/96, /*slots_per_layer=*/24);
//   int slot = r.free_slot(layer);           // -1 when the layer is full
//   r.BeginLoad(layer, group, slot);         // read queued into `slot`
//   ...                                      // the read lands
//   r.CompleteLoad(layer, group);            // now r.slot_of(layer, group) == slot
//   r.Pin(layer, slot); /* read it */ r.Unpin(layer, slot);
//   if (r.CanEvict(layer, group)) r.Evict(layer, group);
//
// Not thread-safe: one owner (the engine's balance step or the simulator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"

namespace kx::policy {

enum class SlotState : uint8_t { kFree = 0, kLoading = 1, kResident = 2 };

class Residency {
 public:
  // Every layer has `slots_per_layer` slots, 0..n_groups.
  Residency(int n_layer, int n_groups, int slots_per_layer);
  // Per-layer capacities: n_layer = capacities.size(), each 0..n_groups.
  Residency(int n_groups, const std::vector<int>& capacities);

  int n_layer() const { return n_layer_; }
  int n_groups() const { return n_groups_; }
  int capacity(int layer) const { return slot_base_[layer + 1] - slot_base_[layer]; }
  int resident_count(int layer) const { return resident_count_[layer]; }
  int loading_count(int layer) const { return loading_count_[layer]; }
  // Slots neither resident nor loading.
  int free_count(int layer) const { return free_count_[layer]; }

  // The slot of a resident group; -1 when it is absent or still loading.
  int slot_of(int layer, int group) const {
    const int slot = group_slot_[GroupIndex(layer, group)];
    return slot >= 0 && slot_state_[slot_base_[layer] + slot] == SlotState::kResident ? slot : -1;
  }
  // The slot a group occupies whether loading or resident; -1 when absent.
  int reserved_slot(int layer, int group) const { return group_slot_[GroupIndex(layer, group)]; }
  bool resident(int layer, int group) const { return slot_of(layer, group) >= 0; }
  bool loading(int layer, int group) const {
    const int slot = group_slot_[GroupIndex(layer, group)];
    return slot >= 0 && slot_state_[slot_base_[layer] + slot] == SlotState::kLoading;
  }
  // The group in a slot (loading or resident); -1 when the slot is free.
  int group_of(int layer, int slot) const { return slot_group_[SlotIndex(layer, slot)]; }
  SlotState state(int layer, int slot) const { return slot_state_[SlotIndex(layer, slot)]; }
  int pins(int layer, int slot) const {
    return static_cast<int>(slot_pins_[SlotIndex(layer, slot)]);
  }
  // A free slot of the layer, or -1 when none. Lowest slot first on a fresh
  // Residency; afterwards the most recently freed (deterministic).
  int free_slot(int layer) const;
  // True when the group is resident and its slot is not pinned: Evict may run.
  bool CanEvict(int layer, int group) const {
    const int slot = slot_of(layer, group);
    return slot >= 0 && slot_pins_[slot_base_[layer] + slot] == 0;
  }

  // Reserves a free slot for a read of `group` (not present anywhere).
  void BeginLoad(int layer, int group, int slot);
  // The read of a loading group landed: the group becomes resident.
  void CompleteLoad(int layer, int group);
  // The read failed or was abandoned: the loading group's slot becomes free.
  void CancelLoad(int layer, int group);
  // Frees a resident, unpinned group's slot.
  void Evict(int layer, int group);
  // Reader pins on resident slots (counted; nested pins are fine).
  void Pin(int layer, int slot);
  void Unpin(int layer, int slot);

  // Full O(layers × (groups + slots)) check that group→slot and slot→group
  // are inverse, states and counts agree and the free list is exact.
  // KX_CHECK fails on a violation.
  void CheckInvariants() const;

 private:
  // Bounds are always checked: an out-of-range id is a caller bug that would
  // otherwise corrupt another layer's map silently.
  int GroupIndex(int layer, int group) const {
    KX_CHECK(layer >= 0 && layer < n_layer_ && group >= 0 && group < n_groups_);
    return layer * n_groups_ + group;
  }
  int SlotIndex(int layer, int slot) const {
    KX_CHECK(layer >= 0 && layer < n_layer_ && slot >= 0 && slot < capacity(layer));
    return slot_base_[layer] + slot;
  }
  void RemoveFromFreeList(int layer, int slot);
  void PushFreeList(int layer, int slot);
  void DebugCheck() const {
#ifndef NDEBUG
    CheckInvariants();
#endif
  }

  int n_layer_ = 0;
  int n_groups_ = 0;
  std::vector<int> slot_base_;         // [n_layer + 1]: prefix sums of capacities
  std::vector<int32_t> group_slot_;    // [layer * n_groups + group]: slot or -1
  std::vector<int32_t> slot_group_;    // [slot_base[layer] + slot]: group or -1
  std::vector<SlotState> slot_state_;  // [slot_base[layer] + slot]
  std::vector<uint32_t> slot_pins_;    // [slot_base[layer] + slot]
  // Per layer, a stack of free slots in free_stack_[slot_base[layer] ...] with
  // free_count_[layer] entries; free_pos_ is each free slot's stack position
  // (-1 when not free) so BeginLoad of any free slot is O(1).
  std::vector<int32_t> free_stack_;
  std::vector<int32_t> free_pos_;
  std::vector<int> free_count_;
  std::vector<int> resident_count_;
  std::vector<int> loading_count_;
};

}  // namespace kx::policy
