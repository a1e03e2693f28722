#include "telemetry/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::telemetry {
namespace {

const IntKnob kMetricsPort("THESEUS_METRICS_PORT", 0,
                           "Serve Prometheus metrics at http://127.0.0.1:<port + local rank>/metrics (0: off): "
                           "operations and bytes by type, latency histograms, per-peer traffic and waits, schedule "
                           "swaps, the schedule in effect, attributes");

struct State {
  std::mutex mu;  // sources; held while a scrape calls them
  std::map<int, MetricsServer::Source> sources;
  int nextId = 1;
  bool started = false;
  std::atomic<int> port{0};
  int fd = -1;
};

State& state() {
  static State* s = new State();  // never destroyed: the server thread may outlive static destruction
  return *s;
}

std::string renderLocked(State& s) {
  MetricsText text;
  text.family("theseus_communicators", "gauge", "Communicators of this process that serve metrics");
  text.sample("theseus_communicators", {}, static_cast<double>(s.sources.size()));
  for (auto& [id, source] : s.sources) source(text);
  return text.render();
}

// One request on a connected socket (bounded: 2 s, 8 KiB), then the answer.
void answer(int fd) {
  std::string request;
  char buf[1024];
  for (int waited = 0; request.find("\r\n\r\n") == std::string::npos && request.size() < 8192 && waited < 2000;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) {
      waited += 100;
      continue;
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  std::string body, status = "200 OK";
  if (request.rfind("GET /metrics", 0) == 0 &&
      (request.size() == 12 || request[12] == ' ' || request[12] == '?')) {
    std::lock_guard lock(state().mu);
    body = renderLocked(state());
  } else {
    status = "404 Not Found";
    body = "Theseus serves /metrics only\n";
  }
  std::string head = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n" +
                     "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  std::string all = head + body;
  size_t done = 0;
  while (done < all.size()) {
    ssize_t n = send(fd, all.data() + done, all.size() - done, MSG_NOSIGNAL);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void serve(int listenFd) {
  for (;;) {
    pollfd p{listenFd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    int fd = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    answer(fd);
    close(fd);
  }
}

// Under mu: binds 127.0.0.1:<port> and starts the thread; false (with a WARN) when it cannot.
bool start(State& s, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 16) != 0) {
    TH_WARN("THESEUS_METRICS_PORT: cannot listen on 127.0.0.1:%d (%s); no metrics endpoint in this process", port,
            strerror(errno));
    close(fd);
    return false;
  }
  s.fd = fd;
  s.port.store(port);
  std::thread(serve, fd).detach();
  TH_INFO(log::kInit, "Prometheus metrics at http://127.0.0.1:%d/metrics", port);
  return true;
}

}  // namespace

int MetricsServer::add(Source source, int localRank) {
  const int64_t base = kMetricsPort.get();
  if (base <= 0) return -1;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.started) {
    s.started = true;
    const int64_t port = base + std::max(localRank, 0);
    if (port > 65535) TH_WARN("THESEUS_METRICS_PORT=%lld + local rank %d is no port; no metrics endpoint",
                              static_cast<long long>(base), localRank);
    else start(s, static_cast<int>(port));
  }
  const int id = s.nextId++;
  s.sources.emplace(id, std::move(source));
  return id;
}

void MetricsServer::remove(int id) {
  if (id < 0) return;
  State& s = state();
  std::lock_guard lock(s.mu);
  s.sources.erase(id);
}

int MetricsServer::port() { return state().port.load(); }

std::string MetricsServer::render() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return renderLocked(s);
}

}  // namespace theseus::telemetry
