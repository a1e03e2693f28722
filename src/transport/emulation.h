// Link emulation (THESEUS_EMULATE): degrade links and ranks on purpose, to
// test and demonstrate adaptive schedules without broken hardware.
//
//   THESEUS_EMULATE="throttle:0->1:10%@seq=100-400;latency:2->3:50us;straggle:3:2ms@t=5s-20s"
//
// Grammar (rules separated by ';', spaces ignored):
//   throttle:<link>:<rate>[@<window>]    rate: <p>% (of what the link achieves
//                                        unthrottled, 0.001..100), <x>GB/s, <x>MB/s
//                                        or <x>Gbps (at least 1 KB/s)
//   latency:<link>:<time>[@<window>]     every message arrives <time> later
//   straggle:<ranks>:<time>[@<window>]   the rank starts each collective <time> late
//   <link>   := <ranks>-><ranks> (one direction) | <ranks><-><ranks> (both)
//   <ranks>  := a rank number or '*' (every rank)
//   <time>   := <x>us | <x>ms | <x>s        (below 2^64 ns, about 584 years)
//   <window> := seq=<a>-[<b>]           collectives a <= seq < b of the communicator
//             | t=<a><unit>-[<b><unit>] seconds (s) or milliseconds (ms) since the
//                                       communicator was created on that rank
// A missing end means "until the end". Ranks are ranks of the communicator
// (every communicator of the process applies the rules; ranks beyond its
// size never match). A malformed value is an ncclInvalidArgument at
// communicator creation naming the rule and the problem.
//
// How it acts. A throttled link a->b is a wire at the *sender* (rank a): the
// send connection to b accepts a message only when the emulated wire finished
// the previous one, which it does
//   service_k = bytes / rate                                  (absolute rates)
//   service_k = bytes * natural_ns_per_byte * (100/p - 1)     (percentages)
// after committing it. natural_ns_per_byte is what the link achieved before
// the rule applied: per collective, the time from the sender's first attempt
// to send on the link to its last message, per byte, as a moving average
// learnt from the link's own traffic (emulation_transport.cc) — so "10%" makes
// the link about ten times slower than it was, whatever the machine; a
// percentage rule acts once the link carried one collective to learn from.
// Because the data waits on the sender's side, both ends see what a slow link
// looks like: the sender has data queued for b (its busy time, counted into
// the link's transport counters while the wire holds it back) and b waits for
// a's data. Latency rules act at the *receiver*: a message from a becomes
// visible to b `time` after b first saw it. Straggle rules make the engine
// sleep (abortably) before each collective of the straggling rank.
//
// Cost when off: nothing — without THESEUS_EMULATE no wrapper is installed
// and the only checks are a null pointer test where connections are created,
// where the executor goes idle and where a collective is issued.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/connection_stats.h"
#include "transport/transport.h"

namespace theseus::transport {

struct EmulationWindow {
  enum class Axis : uint8_t { kAlways, kSeq, kTime } axis = Axis::kAlways;
  uint64_t begin = 0;          // seq, or ns since creation
  uint64_t end = UINT64_MAX;   // exclusive
};

struct EmulationRule {
  enum class Kind : uint8_t { kThrottle, kLatency, kStraggle } kind = Kind::kThrottle;
  int from = -1;               // -1: any rank (straggle: the straggling rank)
  int to = -1;
  bool bothWays = false;       // a<->b
  double fraction = 0;         // throttle: (0, 1] of the natural rate; 0 when an absolute rate is given
  double bytesPerNs = 0;       // throttle: absolute rate (bytes per ns == GB/s)
  uint64_t ns = 0;             // latency / straggle delay
  EmulationWindow window;
  std::string text;            // the rule as written (logs)

  bool matchesLink(int sender, int receiver) const;
};

// Parses THESEUS_EMULATE syntax; the error names the rule and the problem.
Result<std::vector<EmulationRule>> parseEmulation(const std::string& spec);

class LinkEmulation {
 public:
  // The rules of THESEUS_EMULATE for one rank of a communicator; null when unset or empty.
  static Result<std::unique_ptr<LinkEmulation>> fromEnv(int rank, int nranks);
  LinkEmulation(std::vector<EmulationRule> rules, int rank, int nranks);

  // Engine: the collective about to be issued (window axis "seq").
  void onCollective(uint64_t seq) { seq_.store(seq, std::memory_order_relaxed); }
  uint64_t currentSeq() const { return seq_.load(std::memory_order_relaxed); }
  // Engine: how long this rank should stall before the current collective (0: not at all).
  uint64_t straggleNs() const;

  // Transport manager: the send connection to `peer`, wrapped when a throttle names rank -> peer
  // (`counters`: the connection's, which get the time the wire holds data back as busy time).
  std::unique_ptr<SendConnection> wrapSend(std::unique_ptr<SendConnection> inner, int peer,
                                           ConnectionCounters* counters);
  // Transport manager: the receive connection from `peer`, wrapped when a latency rule names peer -> rank.
  std::unique_ptr<RecvConnection> wrapRecv(std::unique_ptr<RecvConnection> inner, int peer);
  // Transport manager: shortens an idle wait so a held-back message is released on time.
  int64_t clampWaitUs(int64_t timeoutUs);

  // Wrappers: whether a rule applies now, and the earliest time one of them releases a message.
  bool activeNow(const EmulationRule& r) const;
  void noteRelease(uint64_t atNs);

  int rank() const { return rank_; }
  const std::vector<EmulationRule>& rules() const { return rules_; }

 private:
  std::vector<EmulationRule> rules_;
  int rank_;
  int nranks_;
  uint64_t createdNs_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> earliestRelease_{UINT64_MAX};
};

}  // namespace theseus::transport
