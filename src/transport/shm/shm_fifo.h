// Internals of the shm transport shared by its send and receive sides and the
// domain that creates them: a view of one FIFO in an inbox (shm_layout.h has
// the protocol), and the two connection factories.
#pragma once

#include <memory>

#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/shm/peer_liveness.h"
#include "transport/shm/region_cache.h"
#include "transport/shm/shm_layout.h"
#include "transport/transport.h"

namespace theseus::transport::shm {

// ThreadSanitizer tracks memory by virtual address; the two ends of a FIFO
// reach its counters through two different mappings of the same pages, so it
// cannot see their release/acquire pairs. Under TSAN both ends also release and
// acquire a key derived from the FIFO's identity (ranks as threads of one process).
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline char gTsanKeys[4096];
inline void* tsanKey(uint64_t commHash, int sender, int receiver, int channel) {
  uint64_t h = commHash ^ (uint64_t(sender) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(receiver) << 20) ^ uint64_t(channel);
  return &gTsanKeys[(h ^ (h >> 29)) % sizeof(gTsanKeys)];
}
inline void tsanRelease(void* key) { __tsan_release(key); }
inline void tsanAcquire(void* key) { __tsan_acquire(key); }
#else
inline void* tsanKey(uint64_t, int, int, int) { return nullptr; }
inline void tsanRelease(void*) {}
inline void tsanAcquire(void*) {}
#endif

struct FifoView {
  FifoControl* ctl;
  SlotHeader* headers;
  char* data;
  uint32_t slots;
  uint64_t slotBytes;
  size_t dataOffset;  // within its segment, for reserve()
  size_t areaOffset;  // within the inbox's data area (FIFO index * data stride): device_inbox.h keeps that geometry
  size_t controlAreaOffset;  // FIFO index * control stride: where a device inbox keeps its control block
  size_t dataBytes;
  void* syncKey;      // see tsanKey()
};

inline FifoView fifoAt(char* base, uint64_t controlOffset, uint64_t controlStride, uint64_t dataOffset, uint64_t dataStride,
                uint32_t slots, uint64_t slotBytes, size_t index) {
  FifoView v;
  char* ctl = base + controlOffset + index * controlStride;
  v.ctl = reinterpret_cast<FifoControl*>(ctl);
  v.headers = reinterpret_cast<SlotHeader*>(ctl + sizeof(FifoControl));
  v.areaOffset = index * dataStride;
  v.controlAreaOffset = index * controlStride;
  v.dataOffset = dataOffset + v.areaOffset;
  v.data = base + v.dataOffset;
  v.slots = slots;
  v.slotBytes = slotBytes;
  v.dataBytes = static_cast<size_t>(slots) * slotBytes;
  v.syncKey = nullptr;
  return v;
}

// Send side: writes into the peer's inbox (`direct`: zero-copy for peer-mappable memory).
std::unique_ptr<SendConnection> makeSendConnection(int peer, const FifoView& fifo, DoorbellWord* peerBell,
                                                   ConnectionCounters* counters, PeerLiveness* liveness, bool direct,
                                                   bool sameProcess);
// Receive side: reads this rank's own inbox (`regions` maps the sender's memory for direct messages).
std::unique_ptr<RecvConnection> makeRecvConnection(int peer, int peerPid, const FifoView& fifo, DoorbellWord* peerBell,
                                                   ConnectionCounters* counters, PeerLiveness* liveness,
                                                   RegionCache* regions, bool sameProcess);

}  // namespace theseus::transport::shm
