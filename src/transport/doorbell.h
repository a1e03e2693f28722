// Doorbell: how an idle rank sleeps until a peer gives it something to do.
//
// One 32-bit word per rank (in its shm inbox, so peers on the host can ring
// it; in private memory for a rank with no shm peers). Protocol:
//   waiter: token = value; check every condition it waits for; then wait(token):
//           announce itself in `sleepers`, re-check value == token, FUTEX_WAIT.
//   ringer: value += 1 (after publishing its data), then FUTEX_WAKE only if
//           `sleepers` is non-zero.
// Both sides use sequentially consistent operations on the two words, so either
// the ringer sees the sleeper (and wakes it) or the sleeper sees the new value
// (and does not sleep): a wake-up can never be lost, and the common case (nobody
// asleep) costs one atomic add and one load, no system call. The futex is a
// shared one (not FUTEX_PRIVATE) because ringers live in other processes.
#pragma once

#include <atomic>
#include <cstdint>

namespace theseus::transport {

struct alignas(64) DoorbellWord {
  std::atomic<uint32_t> value{0};
  char pad_[60];
  std::atomic<uint32_t> sleepers{0};
};
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);

// Wakes an executor's waits (its manager's doorbell); called from helper threads.
using WakeFn = void (*)(void* ctx);

inline uint32_t doorbellToken(const DoorbellWord* d) { return d->value.load(std::memory_order_seq_cst); }
void ringDoorbell(DoorbellWord* d);
// Sleeps until the value differs from `token` or `timeoutUs` passes (spurious
// early returns are possible; callers re-check their conditions).
void sleepOnDoorbell(DoorbellWord* d, uint32_t token, int64_t timeoutUs);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// CPUs this process may run on (sched_getaffinity).
int usableCpus();

}  // namespace theseus::transport
