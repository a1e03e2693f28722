// Fuzz target: NCCL_ALGO and NCCL_PROTO, NCCL's filter syntax
// (policy/algo_filter.h): "[^]name[,name...][;func:[^]name[,name...]]...",
// e.g. "ring", "^nvls", "ring,tree;allreduce:tree", "allreduce:LL,Simple".
//
// The bytes are the variable's value, parsed both ways: as NCCL_ALGO (NCCL's
// algorithm names mapped onto Theseus schedules, schedule names, and names
// with no host-memory equivalent that are ignored) and as NCCL_PROTO
// (protocol names). A filter that parses is described and asked about every
// collective and every built-in schedule (or protocol), and then steers the
// default choice (default_selector.h staticChoice) for both size classes and a
// few rank counts the way the static policy uses it: the choice must always
// be a built-in that serves the request, whatever the filter excludes.
#include <string>

#include "fuzz_util.h"
#include "policy/algo_filter.h"
#include "policy/default_selector.h"
#include "schedule/builtins.h"

using namespace theseus;
using schedule::Collective;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (fuzz::tooLong(size, 4 << 10)) return 0;
  const std::string text = fuzz::text(data, size);
  auto algo = policy::AlgoFilter::parse(text);
  if (algo.isOk()) {
    (void)algo.value().describe();
    for (Collective c : schedule::kEveryCollective) {
      (void)algo.value().restricts(c);
      for (const std::string& name : schedule::builtinNames()) (void)algo.value().allows(c, name);
      for (int n : {1, 2, 5, 8}) {
        for (int sizeClass : {0, 1}) {
          policy::Choice ch = policy::staticChoice({c, sizeClass, n, 1}, algo.value());
          FUZZ_CHECK(schedule::builtinSupports(ch.schedule, c, n), "the static choice '%s' does not serve %s on %d ranks",
                     ch.schedule.c_str(), schedule::collectiveName(c), n);
        }
      }
    }
  } else {
    FUZZ_CHECK(algo.status().message().rfind("NCCL_ALGO='", 0) == 0, "an error that does not name NCCL_ALGO: %s",
               algo.status().message().c_str());
  }
  auto proto = policy::AlgoFilter::parseProtocols(text);
  if (proto.isOk()) {
    (void)proto.value().describe();
    for (Collective c : schedule::kEveryCollective)
      for (const char* p : {"LL", "LL128", "Simple"}) (void)proto.value().allows(c, p);
  } else {
    FUZZ_CHECK(proto.status().message().rfind("NCCL_PROTO='", 0) == 0, "an error that does not name NCCL_PROTO: %s",
               proto.status().message().c_str());
  }
  return 0;
}
