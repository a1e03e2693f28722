// Point-to-point bandwidth of the transports between two forked processes, next
// to single-core memcpy measured in the same run.
//
// For each message size S, rank 0 streams S bytes `iters` times back to back,
// in slot-sized pieces, from a user buffer to rank 1, which copies every piece
// out into its own buffer (what the executor does for a plain receive); after
// the last piece rank 1 answers with a small ack and rank 0 stops the clock.
// So the numbers are user buffer -> user buffer:
//   shm inline  two copies (sender into the FIFO slot, receiver out of it), pipelined on two cores;
//   shm direct  one copy (the receiver reads the sender's ncclMemAlloc buffer in place);
//   tcp         sender copy into the ring, kernel loopback, receiver copy out.
// Usage: transport_bench [--quick]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fake_bootstrap.h"
#include "comm/mem_alloc.h"
#include "transport_test_util.h"

using namespace theseus;
using namespace theseus::testing;

namespace {

enum Mode { kShmInline, kShmDirect, kTcp, kModes };
const char* kModeNames[kModes] = {"shm inline", "shm direct", "tcp loopback"};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

size_t itersFor(size_t size, bool quick) {
  size_t target = (quick ? 64 : 512) << 20;
  return std::max<size_t>(3, std::min<size_t>(4000, target / size));
}

double memcpyGBps(size_t size, bool quick) {
  std::vector<char> a(size, 1), b(size, 2);
  size_t iters = itersFor(size, quick);
  memcpy(b.data(), a.data(), size);
  double t0 = now();
  for (size_t i = 0; i < iters; ++i) {
    memcpy(b.data(), a.data(), size);
    asm volatile("" : : "r"(b.data()) : "memory");
  }
  return static_cast<double>(size) * iters / (now() - t0) / 1e9;
}

#define BENCH_CHECK(cond, what)                                  \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "[rank %d] %s failed: %s\n", rank, #cond, what); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int sender(TransportManager& m, const std::vector<size_t>& sizes, Mode mode, bool quick, double* out) {
  const int rank = 0;
  SendConnection* s = m.sendConnection(1, 0).value();
  RecvConnection* ack = m.recvConnection(1, 0).value();
  size_t maxSize = sizes.back();
  char* src;
  std::vector<char> heap;
  if (mode == kShmDirect) {
    auto p = comm::memAlloc(maxSize);
    BENCH_CHECK(p.isOk(), p.status().message().c_str());
    src = static_cast<char*>(p.value());
  } else {
    heap.resize(maxSize);
    src = heap.data();
  }
  memset(src, 7, maxSize);
  size_t slice = s->slotBytes();
  // One message of `size` bytes, in slot-sized pieces.
  auto sendOne = [&](size_t size) -> Status {
    for (size_t off = 0; off < size; off += slice) {
      size_t n = std::min(slice, size - off);
      SendSlot slot;
      TH_CHECK(acquireWithin(m, s, &slot, 60000));
      if (mode == kShmDirect) {
        s->commitDirect(src + off, n, 0);
      } else {
        memcpy(slot.data, src + off, n);
        s->commitInline(n, 0);
      }
    }
    return Status::ok();
  };
  auto waitAck = [&]() -> Status {
    RecvMessage msg;
    TH_CHECK(peekWithin(m, ack, &msg, 60000));
    ack->release();
    return Status::ok();
  };
  for (size_t k = 0; k < sizes.size(); ++k) {
    size_t size = sizes[k], iters = itersFor(size, quick);
    // Warm-up round trip, then `iters` messages streamed back to back and one ack.
    Status st = sendOne(size);
    if (st.isOk()) st = waitAck();
    double t0 = now();
    for (size_t it = 0; it < iters && st.isOk(); ++it) st = sendOne(size);
    if (st.isOk()) st = waitAck();
    BENCH_CHECK(st.isOk(), st.message().c_str());
    out[k] = static_cast<double>(size) * iters / (now() - t0) / 1e9;
  }
  if (mode == kShmDirect) (void)comm::memFree(src);
  return 0;
}

int receiver(TransportManager& m, const std::vector<size_t>& sizes, bool quick) {
  const int rank = 1;
  RecvConnection* c = m.recvConnection(0, 0).value();
  SendConnection* ack = m.sendConnection(0, 0).value();
  std::vector<char> dst(sizes.back());
  memset(dst.data(), 0, dst.size());
  auto recvBytes = [&](size_t size) -> Status {
    for (size_t got = 0; got < size;) {
      RecvMessage msg;
      TH_CHECK(peekWithin(m, c, &msg, 60000));
      memcpy(dst.data() + (got % dst.size()), msg.data, msg.bytes);
      got += msg.bytes;
      c->release();
    }
    SendSlot slot;
    TH_CHECK(acquireWithin(m, ack, &slot, 60000));
    ack->commitInline(0, 1);
    return Status::ok();
  };
  for (size_t size : sizes) {
    Status st = recvBytes(size);                                   // warm-up
    if (st.isOk()) st = recvBytes(size * itersFor(size, quick));  // the timed stream
    BENCH_CHECK(st.isOk(), st.message().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::vector<size_t> sizes;
  for (size_t s = 64 << 10; s <= (64u << 20); s *= 4) sizes.push_back(s);
  // Results travel back from the forked ranks through shared memory.
  auto* results = static_cast<double*>(mmap(nullptr, sizeof(double) * kModes * sizes.size(), PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (results == MAP_FAILED) return 1;
  int failures = 0;
  for (int mode = 0; mode < kModes; ++mode) {
    auto world = FakeWorld::create(2);
    auto codes = runProcesses(
        2,
        [&](int r) {
          if (mode == kTcp) setenv("THESEUS_TRANSPORT", "socket", 1);
          auto boot = world->bootstrap(r);
          auto m = makeManager(*boot);
          if (!m.isOk()) {
            fprintf(stderr, "rank %d: %s\n", r, m.status().message().c_str());
            return 1;
          }
          int rc = r == 0 ? sender(*m.value(), sizes, static_cast<Mode>(mode), quick, results + mode * sizes.size())
                          : receiver(*m.value(), sizes, quick);
          (void)boot->barrier();
          return rc;
        },
        600);
    for (int c : codes) failures += c != 0;
  }
  printf("# Point-to-point bandwidth between two processes, user buffer to user buffer, GB/s (1e9 B/s)\n");
  printf("%10s %14s %12s %12s %14s\n", "size", "memcpy 1-core", kModeNames[0], kModeNames[1], kModeNames[2]);
  for (size_t k = 0; k < sizes.size(); ++k) {
    double mc = memcpyGBps(sizes[k], quick);
    char label[32];
    if (sizes[k] >= (1 << 20)) snprintf(label, sizeof(label), "%zu MiB", sizes[k] >> 20);
    else snprintf(label, sizeof(label), "%zu KiB", sizes[k] >> 10);
    printf("%10s %14.2f %12.2f %12.2f %14.2f\n", label, mc, results[k], results[sizes.size() + k],
           results[2 * sizes.size() + k]);
  }
  if (failures) fprintf(stderr, "%d rank(s) failed\n", failures);
  return failures ? 1 : 0;
}
