// The process's Prometheus endpoint: THESEUS_METRICS_PORT=<port> serves
// http://127.0.0.1:<port + local rank>/metrics (loopback only; each rank of a
// host on its own port), off by default.
//
// Every communicator adds a source (a function that writes its metrics into a
// MetricsText) at init and removes it before it releases its resources;
// removal waits for a scrape that is calling it. The server is one thread,
// started with the first source when the port is set; a scrape renders every
// source into one body (HTTP/1.0-style: one request per connection, closed
// after the answer; anything but GET /metrics gets 404). A port already in
// use is a WARN and no endpoint for this process, never a failed init.
#pragma once

#include <functional>

#include "telemetry/metrics.h"

namespace theseus::telemetry {

class MetricsServer {
 public:
  using Source = std::function<void(MetricsText&)>;
  // Returns an id for remove(), or -1 when metrics are off.
  static int add(Source source, int localRank);
  static void remove(int id);
  // The port the endpoint listens on (0 when none), for tests and the INFO line.
  static int port();
  // What a scrape returns now (every source added; none when metrics are off).
  static std::string render();
};

}  // namespace theseus::telemetry
