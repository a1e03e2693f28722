#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace theseus::transport {

void ringDoorbell(DoorbellWord* d) {
  d->value.fetch_add(1, std::memory_order_seq_cst);
  if (d->sleepers.load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->value), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void sleepOnDoorbell(DoorbellWord* d, uint32_t token, int64_t timeoutUs) {
  if (timeoutUs <= 0) return;
  d->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (d->value.load(std::memory_order_seq_cst) == token) {
    struct timespec ts;
    ts.tv_sec = timeoutUs / 1000000;
    ts.tv_nsec = (timeoutUs % 1000000) * 1000;
    // EAGAIN (value already changed), EINTR and ETIMEDOUT all just return.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->value), FUTEX_WAIT, token, &ts, nullptr, 0);
  }
  d->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

}  // namespace theseus::transport
