// What one communicator adds to the process's Prometheus endpoint
// (telemetry/metrics_server.h; THESEUS_METRICS_PORT), labelled comm="<hash>", rank="<r>":
//   theseus_operations_total{op}, theseus_operation_bytes_total{op},
//   theseus_operation_duration_seconds{op} (histogram), per peer theseus_peer_sent_bytes_total,
//   theseus_peer_received_bytes_total, theseus_peer_send_busy_seconds_total,
//   theseus_peer_receive_wait_seconds_total, theseus_decision_table_version,
//   theseus_schedule_swaps_total, theseus_schedule{collective,min_bytes,max_bytes,schedule} = 1 for the
//   table in effect now, theseus_communicator_failed, and every attribute of the rank's store as
//   theseus_attribute{name}.
// Everything is read from counters the communicator keeps anyway: serving metrics costs the data
// path nothing.
#pragma once

namespace theseus::comm {

class Communicator;

// After the engine exists (init); a no-op when metrics are off.
void addMetricsSource(Communicator* comm, int localRank);
// Before the engine stops (destroy, abort); waits for a scrape that is reading the communicator.
void removeMetricsSource(Communicator* comm);

}  // namespace theseus::comm
