// Fuzz target: messages on the leader's control channel, as the handlers
// receive them from another rank:
//   selector 0: an epoch protocol message (epoch/epoch_messages.h: GRANT,
//               PREPARE, COMMIT, CANCEL, PROGRESS, ACK), and for PREPARE the
//               decision table it carries;
//   selector 1: a decision table in its wire format (policy/decision_table.h;
//               the initial table of the epoch handshake, PREPARE's payload);
//   selector 2: an attribute snapshot a rank ships to the leader
//               (attrs/attribute_store.h Snapshot), merged into the leader's
//               cluster view;
//   selector 3: a failure report (comm/failure_reports.h).
// The first byte picks the decoder (mod 4), the rest is the payload. Decoders
// validate everything and return an error naming the problem; what decodes is
// used as the receiver uses it (a table is looked up for every collective and
// formatted for the decision log, a snapshot merged and aggregated) and must
// survive its own encoder: an epoch message re-encodes to exactly its bytes,
// a table and a snapshot round-trip to the same content, a failure report
// to the same code, rank and message.
#include <string>

#include "attrs/cluster_view.h"
#include "comm/failure_reports.h"
#include "epoch/decision_log.h"
#include "epoch/epoch_messages.h"
#include "fuzz_util.h"
#include "policy/decision_table.h"

namespace {

using namespace theseus;

void useTable(const policy::DecisionTable& t) {
  for (int c = 0; c < policy::DecisionTable::kCollectives; ++c) {
    const auto coll = static_cast<schedule::Collective>(c);
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1} << 16, UINT64_MAX}) {
      (void)t.lookup(coll, bytes);
      (void)t.rangeIndex(coll, bytes);
    }
  }
  (void)t.describe();
  (void)epoch::DecisionLog::formatBody(t.version(), "fuzz", t);
  auto back = policy::DecisionTable::deserialize(t.serialize());
  FUZZ_CHECK(back.isOk(), "a table does not survive its wire format: %s", back.status().message().c_str());
  FUZZ_CHECK(back.value().sameDecisions(t) && back.value().version() == t.version(), "the wire format changed a table");
}

void epochMessage(const std::string& bytes) {
  auto m = epoch::EpochMsg::decode(bytes);
  if (!m.isOk()) return;
  FUZZ_CHECK(m.value().encode() == bytes, "%s does not re-encode to its bytes", m.value().describe().c_str());
  if (m.value().kind != epoch::MsgKind::kPrepare) return;
  auto t = policy::DecisionTable::deserialize(m.value().text);
  if (t.isOk()) useTable(t.value());
}

void snapshot(const std::string& bytes) {
  auto s = attrs::Snapshot::deserialize(bytes);
  if (!s.isOk()) return;
  auto back = attrs::Snapshot::deserialize(s.value().serialize());
  FUZZ_CHECK(back.isOk(), "a snapshot does not survive its wire format: %s", back.status().message().c_str());
  FUZZ_CHECK(back.value().entries.size() == s.value().entries.size() && back.value().rank == s.value().rank,
             "the wire format changed a snapshot");
  attrs::ClusterView view;
  view.set("link.0.1.gbps", 10, attrs::Source::kProbe, 0, 1000);
  Status st = view.merge(s.value(), 5000);
  FUZZ_CHECK(st.isOk(), "a snapshot that decodes is rejected by the view: %s", st.message().c_str());
  (void)view.describe(6000);
  auto any = attrs::Pattern::compile("*");
  FUZZ_CHECK(any.isOk(), "pattern");
  for (int a = 0; a <= static_cast<int>(attrs::Aggregate::kCount); ++a)
    (void)view.aggregate(any.value(), static_cast<attrs::Aggregate>(a), 6000);
  view.forgetRank(s.value().rank);
}

void failureReport(const std::string& bytes) {
  int code = 0, rank = -1;
  std::string message;
  if (!comm::decodeFailureReport(bytes, &code, &rank, &message)) return;
  const std::string again = comm::encodeFailureReport(rank, Status(static_cast<ncclResult_t>(code), message));
  int code2 = 0, rank2 = -1;
  std::string message2;
  FUZZ_CHECK(comm::decodeFailureReport(again, &code2, &rank2, &message2), "a re-encoded report does not decode");
  FUZZ_CHECK(code2 == code && rank2 == rank && message2 == message, "a report changed through its encoding");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || fuzz::tooLong(size, 64 << 10)) return 0;
  const std::string payload = fuzz::text(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: epochMessage(payload); break;
    case 1: {
      auto t = policy::DecisionTable::deserialize(payload);
      if (t.isOk()) useTable(t.value());
      break;
    }
    case 2: snapshot(payload); break;
    case 3: failureReport(payload); break;
  }
  return 0;
}
