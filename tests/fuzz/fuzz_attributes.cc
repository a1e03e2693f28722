// Fuzz target: external attribute files (THESEUS_ATTRS_FILE,
// attrs/external_attributes.h), the JSON an operator's health agent writes:
//   {"version": 1, "attributes": {"node.h1.nic.mlx5_0.healthy": 0, ...}}
//
// The bytes are the file. ExternalAttributes::parse checks the structure,
// every name (attribute_store.h checkName) and that every value is a finite
// number or a boolean; errors quote the file's bytes escaped. Parsed values go
// where poll() puts them: replaceSource into a rank's AttributeStore, whose
// snapshot is shipped to the leader (Snapshot::serialize -> deserialize, the
// control-channel format) and merged into the cluster view. The leader then
// runs a policy that reads those names the way real policies do - link
// throughput, bottlenecks and penalties for rings around slow links, host and
// NIC health, straggler roots, aggregates in conditions - so names like
// "link.999999999.0.gbps" or "node.<host>.healthy" reach the code that parses
// ranks and hosts out of them.
#include <string>

#include "attrs/attribute_store.h"
#include "attrs/cluster_view.h"
#include "attrs/external_attributes.h"
#include "fuzz_util.h"
#include "fuzz_view.h"
#include "policy/json_policy.h"

namespace {

using namespace theseus;

// Reads what attributes can say: every kind of rule that looks at them.
const char* const kPolicy = R"json({"version": 1, "name": "fuzz attributes",
  "settings": {"hold": 1, "margin": 0.1, "max_age_ms": 60000},
  "rules": [
    {"name": "avoid", "collectives": ["allreduce", "allgather"],
     "when": "slow_links > 0 or max(link.*.*.penalty) > 1", "use": {"schedule": "ring", "order": "avoid_slow_links"}},
    {"name": "bidir", "collectives": ["reducescatter"], "when": "count(node.*.nic.*.healthy) > 0",
     "use": {"schedule": "ring", "order": "avoid_slow_links", "bidirectional": true}},
    {"name": "straggler", "collectives": ["broadcast", "reduce"],
     "when": "max(rank.*.wait_us) > 2 * median(rank.*.wait_us) or exists(rank.*.late)",
     "use": {"schedule": "tree", "root": "straggler"}},
    {"name": "hosts", "nodes": {"min": 2}, "when": "min(node.*.healthy) == 1 and mean(link.*.*.gbps) >= 0",
     "use": {"schedule": ["hierarchical", "ring"], "order": "by_host"}},
    {"name": "sums", "when": "sum(link.*.*.bottleneck) / count(link.*.*.bottleneck) > 0.5", "use": "direct"}
  ]})json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (fuzz::tooLong(size, 16 << 10)) return 0;
  auto parsed = attrs::ExternalAttributes::parse(fuzz::text(data, size), "fuzz-attrs.json");
  if (!parsed.isOk()) {
    FUZZ_CHECK(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  // Rank 1 of 4 read the file (every rank of a host does).
  attrs::AttributeStore store(1);
  Status st = store.replaceSource(attrs::Source::kFile, parsed.value());
  FUZZ_CHECK(st.isOk(), "parsed values are rejected by the store: %s", st.message().c_str());
  auto snapshot = attrs::Snapshot::deserialize(store.snapshot().serialize());
  FUZZ_CHECK(snapshot.isOk(), "a snapshot does not survive its wire format: %s", snapshot.status().message().c_str());
  FUZZ_CHECK(snapshot.value().entries.size() == parsed.value().size(), "%zu values in the file, %zu in the snapshot",
             parsed.value().size(), snapshot.value().entries.size());
  for (const fuzz::Scenario& s : fuzz::scenarios()) {
    attrs::ClusterView view = s.view;
    Status merged = view.merge(snapshot.value(), 2 * fuzz::kSecond);
    FUZZ_CHECK(merged.isOk(), "the leader rejects a rank's snapshot: %s", merged.message().c_str());
    (void)view.describe(3 * fuzz::kSecond);
    auto p = policy::JsonPolicy::parse(kPolicy, "fuzz-attributes-policy.json", ".");
    FUZZ_CHECK(p.isOk(), "the built-in policy does not load: %s", p.status().message().c_str());
    policy::PolicyInput in = s.input(3 * fuzz::kSecond);
    in.view = &view;
    auto t = policy::evaluate(*p.value(), in);
    FUZZ_CHECK(t.isOk(), "evaluation failed: %s", t.status().message().c_str());
  }
  return 0;
}
