#include "comm/metrics_source.h"

#include <cinttypes>
#include <cstdio>

#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "epoch/epoch_service.h"
#include "schedule/ir.h"
#include "telemetry/metrics_server.h"
#include "telemetry/telemetry.h"
#include "transport/transport_manager.h"

namespace theseus::comm {
namespace {

void declare(telemetry::MetricsText& t) {
  t.family("theseus_operations_total", "counter", "Operations (collectives by type, send/recv groups) completed");
  t.family("theseus_operation_bytes_total", "counter", "Bytes of the operations completed, by type");
  t.family("theseus_operation_duration_seconds", "histogram", "How long operations took, by type");
  t.family("theseus_peer_sent_bytes_total", "counter", "Bytes sent to each peer");
  t.family("theseus_peer_received_bytes_total", "counter", "Bytes received from each peer");
  t.family("theseus_peer_send_busy_seconds_total", "counter", "Time the connections to each peer were busy sending");
  t.family("theseus_peer_receive_wait_seconds_total", "counter", "Time spent waiting for data from each peer");
  t.family("theseus_decision_table_version", "gauge", "Version of the decision table in effect for the next collective");
  t.family("theseus_schedule_swaps_total", "counter", "Decision tables that took effect after the first");
  t.family("theseus_schedule", "gauge", "The schedule the table in effect gives each collective and size range (1)");
  t.family("theseus_communicator_failed", "gauge", "1 once the communicator failed (a peer died, an abort, an error)");
  t.family("theseus_attribute", "gauge", "The rank's runtime attributes (docs/attributes.md), by name");
}

void write(Communicator* comm, telemetry::MetricsText& t) {
  declare(t);
  char hash[24];
  snprintf(hash, sizeof(hash), "%016" PRIx64, comm->commHash());
  const telemetry::MetricsText::Labels base = {{"comm", hash}, {"rank", std::to_string(comm->rank())}};
  auto with = [&](std::initializer_list<std::pair<std::string, std::string>> more) {
    telemetry::MetricsText::Labels l = base;
    l.insert(l.end(), more.begin(), more.end());
    return l;
  };
  CollectiveEngine* engine = comm->engine();
  epoch::EpochService* epochs = engine != nullptr ? engine->epochs() : nullptr;
  if (telemetry::Recorder* rec = epochs != nullptr ? epochs->telemetry() : nullptr) {
    for (const telemetry::OpStats& o : rec->opStats()) {
      const auto l = with({{"op", o.op}});
      t.sample("theseus_operations_total", l, static_cast<double>(o.count));
      t.sample("theseus_operation_bytes_total", l, static_cast<double>(o.bytes));
      uint64_t cumulative = 0;
      for (size_t b = 0; b < telemetry::kLatencyBucketCount; ++b) {
        cumulative += o.buckets[b];
        char le[32];
        if (b + 1 < telemetry::kLatencyBucketCount) snprintf(le, sizeof(le), "%g", telemetry::kLatencyBuckets[b]);
        else snprintf(le, sizeof(le), "+Inf");
        auto lb = l;
        lb.emplace_back("le", le);
        t.sample("theseus_operation_duration_seconds", lb, static_cast<double>(cumulative), "_bucket");
      }
      t.sample("theseus_operation_duration_seconds", l, static_cast<double>(o.busyNs) / 1e9, "_sum");
      t.sample("theseus_operation_duration_seconds", l, static_cast<double>(cumulative), "_count");
    }
  }
  if (transport::TransportManager* tm = comm->transports()) {
    for (int p = 0; p < comm->nranks(); ++p) {
      if (p == comm->rank()) continue;
      const transport::PeerStats s = tm->stats(p);
      const auto l = with({{"peer", std::to_string(p)}});
      t.sample("theseus_peer_sent_bytes_total", l, static_cast<double>(s.bytesSent));
      t.sample("theseus_peer_received_bytes_total", l, static_cast<double>(s.bytesReceived));
      t.sample("theseus_peer_send_busy_seconds_total", l, static_cast<double>(s.sendBusyNs) / 1e9);
      t.sample("theseus_peer_receive_wait_seconds_total", l, static_cast<double>(s.recvWaitNs) / 1e9);
    }
  }
  if (epochs != nullptr) {
    std::shared_ptr<const epoch::Epoch> e = epochs->clock().epochFor(engine->nextSeq());
    t.sample("theseus_decision_table_version", base, static_cast<double>(e->version));
    t.sample("theseus_schedule_swaps_total", base, static_cast<double>(e->version > 0 ? e->version - 1 : 0));
    for (int c = 0; c < policy::DecisionTable::kCollectives; ++c) {
      const auto coll = static_cast<schedule::Collective>(c);
      for (const auto& r : e->table.ranges(coll))
        t.sample("theseus_schedule",
                 with({{"collective", schedule::collectiveName(coll)},
                       {"min_bytes", std::to_string(r.minBytes)},
                       {"max_bytes", r.maxBytes == UINT64_MAX ? std::string("+Inf") : std::to_string(r.maxBytes)},
                       {"schedule", r.decision.toString()}}),
                 1);
    }
  }
  const ncclResult_t err = comm->asyncError();
  t.sample("theseus_communicator_failed", base, err != ncclSuccess && err != ncclInProgress ? 1 : 0);
  for (const auto& [name, a] : comm->attributes().list()) t.sample("theseus_attribute", with({{"name", name}}), a.value);
}

}  // namespace

void addMetricsSource(Communicator* comm, int localRank) {
  comm->setMetricsId(telemetry::MetricsServer::add([comm](telemetry::MetricsText& t) { write(comm, t); }, localRank));
}

void removeMetricsSource(Communicator* comm) {
  telemetry::MetricsServer::remove(comm->metricsId());
  comm->setMetricsId(-1);
}

}  // namespace theseus::comm
