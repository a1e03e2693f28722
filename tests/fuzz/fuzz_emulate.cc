// Fuzz target: THESEUS_EMULATE, the link-emulation rules
// (transport/emulation.h):
//   throttle:0->1:10%@seq=100-400;latency:2<->3:50us;straggle:*:2ms@t=5s-20s
//
// The bytes are the variable's value. parseEmulation splits rules at ';',
// then each into kind, target (a rank, '*', a->b or a<->b) and value (a
// percentage, GB/s, MB/s, Gbps, or a time in us/ms/s), with an optional
// window (seq=a-[b] or t=a<unit>-[b<unit>]); a malformed value is an error
// naming the rule. Rules that parse go where a communicator puts them: a
// LinkEmulation for each rank of a 4-rank communicator, asked which links
// match, which rules are active at a few collective numbers, how long the
// rank straggles and how long an idle wait may last.
#include <string>

#include "fuzz_util.h"
#include "transport/emulation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 4 << 10)) return 0;
  auto rules = transport::parseEmulation(fuzz::text(data, size));
  if (!rules.isOk()) {
    FUZZ_CHECK(rules.status().message().rfind("THESEUS_EMULATE rule ", 0) == 0, "an error that names no rule: %s",
               rules.status().message().c_str());
    return 0;
  }
  for (const transport::EmulationRule& r : rules.value()) {
    FUZZ_CHECK(r.window.end > r.window.begin, "rule '%s' has an empty window", r.text.c_str());
    FUZZ_CHECK(r.kind != transport::EmulationRule::Kind::kThrottle || r.fraction > 0 || r.bytesPerNs > 0,
               "throttle '%s' has no rate", r.text.c_str());
  }
  constexpr int kRanks = 4;
  for (int rank = 0; rank < kRanks; ++rank) {
    transport::LinkEmulation e(rules.value(), rank, kRanks);
    for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{100}, uint64_t{1} << 40}) {
      e.onCollective(seq);
      (void)e.straggleNs();
      for (const transport::EmulationRule& r : e.rules()) {
        (void)e.activeNow(r);
        for (int peer = 0; peer < kRanks; ++peer) (void)r.matchesLink(rank, peer);
      }
    }
    e.noteRelease(UINT64_MAX - 1);
    (void)e.clampWaitUs(1000);
  }
  return 0;
}
