// The layout of one FIFO in memory two ranks map: the shared-memory backend's
// FIFOs (shm/shm_layout.h has the protocol and the inbox around them) and the
// device FIFOs the device executor drives itself (exec/device/dev_plan.h
// mirrors these structures for code compiled for a GPU, and checks them).
#pragma once

#include <atomic>
#include <cstdint>

namespace theseus::transport::shm {

struct alignas(64) FifoControl {
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
};

enum SlotKind : uint32_t {
  kSlotInline = 1,         // payload in the slot
  kSlotDirectRegion = 2,   // payload in a region of the SharedMemoryRegistry of process `pid`
  kSlotDirectAddress = 3,  // payload at `address` in the receiver's own process (same address space)
  kSlotDirectDevice = 4,   // device FIFOs: payload in the sender's registered device buffer, its export
                           // `regionId` at `offset` (shm/device_exports.h)
};

struct alignas(64) SlotHeader {
  uint64_t bytes;
  uint32_t tag;
  uint32_t kind;
  int32_t pid;
  int32_t fd;
  uint64_t regionId;
  uint64_t offset;
  uint64_t regionBytes;
  uint64_t address;
};
static_assert(sizeof(SlotHeader) == 64 && sizeof(FifoControl) == 128);

}  // namespace theseus::transport::shm
