// Helpers shared by the transport tests: bounded blocking send/receive on top
// of the non-blocking connection interface, and deterministic payloads.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "fake_bootstrap.h"
#include "transport/transport_manager.h"

namespace theseus::testing {

using transport::RecvConnection;
using transport::RecvMessage;
using transport::SendConnection;
using transport::SendSlot;
using transport::TransportManager;

// Deterministic 64-bit word `i` of stream `seed`.
inline uint64_t patternWord(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills `bytes` (any length) with the pattern starting at byte offset `at`.
inline void fillPattern(void* dst, size_t bytes, uint64_t seed, uint64_t at) {
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < bytes; ++i) {
    uint64_t b = at + i;
    p[i] = static_cast<unsigned char>(patternWord(seed, b / 8) >> (8 * (b % 8)));
  }
}

// Word-wise fill/check for 8-byte aligned offsets and lengths (fast path for big transfers).
inline void fillWords(void* dst, size_t bytes, uint64_t seed, uint64_t at) {
  auto* w = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = patternWord(seed, at / 8 + i);
}
inline bool checkWords(const void* src, size_t bytes, uint64_t seed, uint64_t at) {
  const auto* w = static_cast<const uint64_t*>(src);
  for (size_t i = 0; i < bytes / 8; ++i)
    if (w[i] != patternWord(seed, at / 8 + i)) return false;
  return true;
}

// Waits (bounded) until a slot is free. Drives progress and sleeps on the doorbell.
inline Status acquireWithin(TransportManager& m, SendConnection* c, SendSlot* slot, int64_t ms) {
  Deadline d = Deadline::afterMs(ms);
  for (;;) {
    uint64_t token = m.activityToken();
    if (c->tryAcquire(slot)) return Status::ok();
    TH_CHECK(c->progress());
    if (d.expired()) return remoteError("no free slot to rank %d within %lld ms", c->peer(), (long long)ms);
    m.waitForActivity(token, 2000);
  }
}

inline Status peekWithin(TransportManager& m, RecvConnection* c, RecvMessage* msg, int64_t ms) {
  Deadline d = Deadline::afterMs(ms);
  for (;;) {
    uint64_t token = m.activityToken();
    if (c->tryPeek(msg)) return Status::ok();
    TH_CHECK(c->progress());
    if (d.expired()) return remoteError("no message from rank %d within %lld ms", c->peer(), (long long)ms);
    m.waitForActivity(token, 2000);
  }
}

inline Status consumedWithin(TransportManager& m, SendConnection* c, uint64_t ticket, int64_t ms) {
  Deadline d = Deadline::afterMs(ms);
  for (;;) {
    uint64_t token = m.activityToken();
    if (c->consumed(ticket)) return Status::ok();
    TH_CHECK(c->progress());
    if (d.expired()) return remoteError("ticket %llu not consumed within %lld ms", (unsigned long long)ticket,
                                        (long long)ms);
    m.waitForActivity(token, 2000);
  }
}

// Creates a manager for `rank` (the caller's thread/process plays that rank),
// with the configured backends or the ones named (in order).
inline Result<std::unique_ptr<TransportManager>> makeManager(bootstrap::Bootstrap& boot, int channels = 1,
                                                             std::vector<std::string> backends = {},
                                                             std::string net = "") {
  transport::TransportOptions o;
  o.maxChannels = channels;
  o.backends = std::move(backends);
  o.net = std::move(net);  // ncclConfig_t.netName after NCCL_NET (comm/config.cc)
  return transport::createTransportManager(boot, o);
}

}  // namespace theseus::testing
