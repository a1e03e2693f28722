// Link emulation (THESEUS_EMULATE): degrade links and ranks on purpose, to
// test and demonstrate adaptive schedules without broken hardware.
//
//   THESEUS_EMULATE="throttle:0->1:10%@seq=100-400;latency:2->3:50us;straggle:3:2ms@t=5s-20s"
//
// Grammar (rules separated by ';', spaces ignored):
//   throttle:<link>:<rate>[@<window>]    rate: <p>% (of what the link achieves
//                                        unthrottled), <x>GB/s, <x>MB/s or <x>Gbps
//   latency:<link>:<time>[@<window>]     every message arrives <time> later
//   straggle:<ranks>:<time>[@<window>]   the rank starts each collective <time> late
//   <link>   := <ranks>-><ranks> (one direction) | <ranks><-><ranks> (both)
//   <ranks>  := a rank number or '*' (every rank)
//   <time>   := <x>us | <x>ms | <x>s
//   <window> := seq=<a>-[<b>]           collectives a <= seq < b of the communicator
//             | t=<a><unit>-[<b><unit>] seconds (s) or milliseconds (ms) since the
//                                       communicator was created on that rank
// A missing end means "until the end". Ranks are ranks of the communicator
// (every communicator of the process applies the rules; ranks beyond its
// size never match). A malformed value is an ncclInvalidArgument at
// communicator creation naming the rule and the problem.
//
// How it acts. Link rules wrap the *receiving* side of the link (the receive
// connection of rank b from rank a): a message becomes visible to the
// executor only when the emulated wire delivered it. The wire serves one
// message at a time: message k, first seen at time s_k, is delivered at
//   end_k = max(s_k, end_{k-1}) + service_k,  visible at end_k + latency
// where service_k = bytes / rate for absolute rates, and
// bytes * natural_ns_per_byte * (100/p - 1) for a percentage, natural_ns_per_byte
// being a moving average of how long this receiver takes to consume a byte of
// this link (so "10%" makes the link about ten times slower than it is,
// whatever the machine). The sender sees the slow link as back-pressure: its
// FIFO slots come back late. Straggle rules make the engine sleep (abortably)
// before each collective of the straggling rank.
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
  // Engine: how long this rank should stall before the current collective (0: not at all).
  uint64_t straggleNs() const;

  // Transport manager: the receive connection from `peer`, wrapped when a link rule names peer -> rank.
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
