// Active probes of the links between hosts, so that what the policy knows
// about a link does not depend on a schedule using it.
//
// Why. The data path measures only the links the current schedule uses. A
// ring that goes around a slow link stops measuring it; without another
// source, its verdict can only be kept forever (and recovery is never seen) or
// expire (and the policy returns to the slow link to re-test it, paying a whole
// collective at the slow pace each time). Probes measure every link between
// hosts in the background, so the leader keeps a slow link's verdict while the
// probes still see it slow, and clears it only once they see it fast again
// (policy/ring_order.h, LinkVerdicts).
//
// How. One TCP connection per ordered pair of ranks on different hosts,
// claimed through the bootstrap (connectTo/acceptFrom, tag 0x7c...), so probes
// take the same interface and path as the socket transport's data. Two threads
// per communicator and rank:
//   * the sender probes each remote peer in turn, every THESEUS_LINK_PROBE_MS:
//     a bulk transfer (header + payload), answered once all of it arrived
//     with how long the payload took to arrive (the spread between the first
//     and the last read); payload over spread is published as
//     link.<me>.<peer>.probe_gbps (attrs/probes.h);
//   * the server reads every probe sent to this rank and answers it.
// A probe that changes a link's class - below a quarter of the median of this
// rank's latest probes of its other links, or not - is confirmed by another
// after a quarter of the interval: the leader needs two clean probes in a row
// to clear a slow verdict (and slow ones to let a host's links follow), so a
// link that just healed is back in about an interval instead of two, at the
// cost of one extra probe per change.
// The payload adapts per link so that a bulk transfer lasts about 1/200 of the
// interval (doubling or halving between 256 KiB and 1 MiB): about 0.5% of the
// time of a link between ~0.2 and ~0.8 GB/s, and little CPU on faster ones.
// Never below 256 KiB: shapers pass a burst at line rate (a token bucket's
// 64 KB fills while a link is idle, and an avoided link is idle), and a probe
// must be long enough past it to see the link's rate; on a link slower than
// ~50 MB/s that makes the share larger (400 Mbit/s: about 1% at the default
// interval of 500 ms).
//
// Ranks probe only when the leader's policy uses link measurements
// (Policy::usesLinkMeasurements, agreed in the creation handshake): a static
// policy's communicator costs nothing here.
//
// Failures stay local: a peer whose probe connection fails or times out is no
// longer probed (logged under ATTRS at INFO); nothing here fails a
// communicator. Malformed probe headers close that connection. stop() ends
// the threads within a poll slice (every wait is one), except a connection
// still being set up (bounded by 30 s while a peer does not come).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "attrs/probes.h"
#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"

namespace theseus::epoch {

class LinkProber {
 public:
  static constexpr size_t kMinBytes = 256 << 10;
  static constexpr size_t kMaxBytes = 1 << 20;

  struct Options {
    int rank = 0;
    int nranks = 1;
    std::vector<int> hostOf;  // host index per rank
    bootstrap::Bootstrap* boot = nullptr;
    const AbortFlag* abort = nullptr;
    attrs::ProbeSet* probes = nullptr;
    uint64_t intervalNs = 0;
  };

  // How long after a probe of `gbps` the link is probed again: a quarter of `intervalNs` when
  // the probe changed the link's class against the median of `others` (the latest probes of
  // this rank's other links; *slowClass: the class before, -1 unknown, updated), else intervalNs.
  static uint64_t nextProbeDelayNs(double gbps, const std::vector<double>& others, int* slowClass,
                                   uint64_t intervalNs);
  // THESEUS_LINK_PROBE_MS in ns (0: probes off).
  static uint64_t configuredIntervalNs();
  // Whether `o` has any link to probe (some rank on another host).
  static bool worthProbing(const Options& o);

  explicit LinkProber(Options o);
  ~LinkProber() { stop(); }
  LinkProber(const LinkProber&) = delete;
  LinkProber& operator=(const LinkProber&) = delete;

  Status start();
  void stop();

 private:
  struct Target {
    int peer = -1;
    int fd = -1;
    size_t bytes = 256 << 10;
    uint64_t dueNs = 0;
    double gbps = -1;   // the latest probe's throughput (-1: none yet)
    int slow = -1;      // whether it was below kSlowShare of this rank's other links (-1: unknown)
  };
  void senderLoop();
  void serverLoop();
  bool probeOnce(Target& t);  // false: the connection is gone
  bool sleepUntil(uint64_t ns);  // false: stopping

  Options o_;
  std::atomic<bool> stop_{false};
  AbortFlag stopFlag_;  // the same, for bounded waits (bootstrap::Wait)
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread sender_, server_;
};

}  // namespace theseus::epoch
