// Layout of a rank's shared-memory inbox (one POSIX shm segment per rank and
// communicator), which every local peer maps:
//
//   [InboxHeader: identity, geometry, the rank's doorbell]          page 0
//   [FIFO control blocks: FifoControl + SlotHeader[slots]] x nLocal*nChannels
//   [FIFO data: slots * slotBytes, page aligned]           x nLocal*nChannels
//
// FIFO k = senderLocalIndex * nChannels + channel carries messages from that
// local rank to the inbox owner on that channel (the owner's own index is
// unused and never allocated). The control area is allocated at creation; a
// FIFO's data pages are allocated (fallocate) when either side first connects,
// so unused peers and channels cost address space, not memory.
//
// FIFO protocol (single producer, single consumer, no locks):
//   head = messages the sender committed, tail = messages the receiver released,
//   each on its own cache line. Slot i of message m is m % slots.
//   sender:   wait until head - tail < slots (acquire tail); write payload and
//             SlotHeader; head.store(head + 1, release); ring the receiver's doorbell.
//   receiver: wait until head > tail (acquire head); read SlotHeader and payload
//             (or the sender's memory for a direct message); tail.store(tail + 1,
//             release); ring the sender's doorbell.
// The release/acquire pairs order the payload before the counter that publishes
// it; a message's ticket is its head value after commit, so consumed(t) is tail >= t.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/doorbell.h"
#include "transport/fifo_layout.h"

namespace theseus::transport::shm {

inline constexpr uint64_t kInboxMagic = 0x58424d4853485454ull;  // "TTHSHMBX"
inline constexpr uint32_t kInboxVersion = 1;

struct alignas(64) InboxHeader {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  uint64_t commHash;
  uint32_t nLocal;
  uint32_t nChannels;
  uint32_t slots;
  uint32_t reserved;
  uint64_t slotBytes;
  uint64_t controlOffset;   // first FIFO control block
  uint64_t controlStride;   // bytes per control block
  uint64_t dataOffset;      // first FIFO data area
  uint64_t dataStride;      // bytes per FIFO data area
  uint64_t totalBytes;
  DoorbellWord bell;        // the owner's doorbell
};

inline size_t controlStride(uint32_t slots) { return sizeof(FifoControl) + slots * sizeof(SlotHeader); }

}  // namespace theseus::transport::shm
