// Link probes (the protocol is described in link_prober.h).
#include "epoch/link_prober.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "common/knobs.h"
#include "common/log.h"
#include "bootstrap/socket.h"
#include "transport/peer_accept.h"

namespace theseus::epoch {
namespace {

const IntKnob kProbeMs("THESEUS_LINK_PROBE_MS", 500,
                       "Every link between hosts is probed this often in the background (a bulk transfer lasting "
                       "~1/200 of this), so slow links the schedule avoids are still measured and their "
                       "recovery is seen; 0: off (must be equal on all ranks)");

constexpr uint32_t kTag = 0x7c000000u;  // bootstrap tag of probe connections (0x7d: TCP data, 0x7e: net plugin)
constexpr uint32_t kMagic = 0x50524f42;  // "PROB"
constexpr int64_t kConnectMs = 30000;
constexpr int64_t kProbeTimeoutMs = 5000;

struct Header {
  uint32_t magic;
  uint32_t bytes;
};

// The server's answer: how long the payload took to arrive, from the end of
// the first read that brought payload to the end of the last (so queueing in
// front of the first byte does not count), and how many bytes came in that time.
struct Answer {
  uint32_t magic;
  uint32_t bytes;
  uint64_t spreadNs;
  uint64_t spreadBytes;
};

// Probe sockets: non-blocking (every wait is a bounded poll), no Nagle delay.
void configure(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  bootstrap::setNonBlocking(fd, true);
}

}  // namespace

uint64_t LinkProber::configuredIntervalNs() {
  int64_t ms = kProbeMs.get();
  return ms > 0 ? static_cast<uint64_t>(ms) * 1'000'000 : 0;
}

bool LinkProber::worthProbing(const Options& o) {
  if (o.intervalNs == 0 || o.boot == nullptr || o.probes == nullptr) return false;
  if (o.hostOf.size() != static_cast<size_t>(o.nranks) || o.rank < 0 || o.rank >= o.nranks) return false;
  for (int p = 0; p < o.nranks; ++p)
    if (o.hostOf[p] != o.hostOf[o.rank]) return true;
  return false;
}

LinkProber::LinkProber(Options o) : o_(std::move(o)) {}

Status LinkProber::start() {
  try {
    server_ = std::thread([this] { serverLoop(); });
    sender_ = std::thread([this] { senderLoop(); });
  } catch (const std::system_error& e) {
    stop();
    return systemError("cannot start the link probe threads: %s", e.what());
  }
  return Status::ok();
}

void LinkProber::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    stopFlag_.set();
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  if (server_.joinable()) server_.join();
}

bool LinkProber::sleepUntil(uint64_t ns) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_.load()) {
    uint64_t now = nowNs();
    if (now >= ns) return true;
    cv_.wait_for(lock, std::chrono::nanoseconds(ns - now));
  }
  return false;
}

// One bulk transfer to t.peer; publishes the throughput the server saw.
//
// Throughput from the arrival spread, not from the sender's clock: on a
// congested link a round trip includes queueing that varies by more than the
// transfer time, and subtracting one measured a moment earlier can make a slow
// link look arbitrarily fast. The spread measures the rate at which the bytes
// came out of the bottleneck. A transfer that arrived in a single read (too
// small for this link) falls back to payload over the whole exchange, a lower
// bound, and the payload grows for the next probe.
bool LinkProber::probeOnce(Target& t) {
  static const std::vector<char> payload(kMaxBytes, 'p');
  Header h{kMagic, static_cast<uint32_t>(t.bytes)};
  Answer ans{};
  const bootstrap::Wait wait = bootstrap::Wait::forMs(kProbeTimeoutMs, o_.abort, &stopFlag_);
  const std::string who = "rank " + std::to_string(t.peer) + " (link probe)";
  const uint64_t t0 = nowNs();
  Status st = bootstrap::sendAll(t.fd, &h, sizeof(h), wait, who);
  if (st.isOk()) st = bootstrap::sendAll(t.fd, payload.data(), t.bytes, wait, who);
  if (st.isOk()) st = bootstrap::recvAll(t.fd, &ans, sizeof(ans), wait, who);
  if (st.isOk() && (ans.magic != kMagic || ans.bytes != h.bytes || ans.spreadBytes > t.bytes))
    st = remoteError("rank %d answered a link probe with garbage", t.peer);
  if (!st.isOk()) {
    if (!stop_.load())
      TH_INFO(log::kAttrs, "rank %d: link probes to rank %d stop: %s", o_.rank, t.peer, st.message().c_str());
    return false;
  }
  const uint64_t whole = nowNs() - t0;
  const bool spread = ans.spreadNs > 0 && ans.spreadBytes >= t.bytes / 4;  // else it came in one read
  double gbps = 0;
  if (spread) gbps = double(ans.spreadBytes) / double(ans.spreadNs);
  else if (whole > 0) gbps = double(t.bytes) / double(whole);
  o_.probes->recordProbe(t.peer, gbps);
  t.gbps = gbps;
  const uint64_t target = std::max<uint64_t>(o_.intervalNs / 200, 1);
  const uint64_t took = spread ? ans.spreadNs : 0;
  if (took < target / 2 && t.bytes < kMaxBytes) t.bytes *= 2;
  else if (took > 2 * target && t.bytes > kMinBytes) t.bytes /= 2;
  return true;
}

uint64_t LinkProber::nextProbeDelayNs(double gbps, const std::vector<double>& others, int* slowClass,
                                      uint64_t intervalNs) {
  constexpr double kSlowShare = 0.25;  // the leader's clean limit at slow_link_ratio 0.5
  std::vector<double> known;
  for (double g : others)
    if (g > 0) known.push_back(g);
  if (known.empty() || gbps < 0) return intervalNs;
  std::nth_element(known.begin(), known.begin() + known.size() / 2, known.end());
  const int slow = gbps < kSlowShare * known[known.size() / 2] ? 1 : 0;
  const bool changed = *slowClass >= 0 && slow != *slowClass;
  *slowClass = slow;
  return changed ? intervalNs / 4 : intervalNs;
}

// Connects to every rank on another host, then probes them in turn.
void LinkProber::senderLoop() {
  std::vector<Target> targets;
  for (int p = 0; p < o_.nranks && !stop_.load(); ++p) {
    if (o_.hostOf[p] == o_.hostOf[o_.rank]) continue;
    auto fd = o_.boot->connectTo(p, kTag, Deadline::afterMs(kConnectMs));
    if (!fd.isOk()) {
      TH_INFO(log::kAttrs, "rank %d: no link probes to rank %d: %s", o_.rank, p, fd.status().message().c_str());
      continue;
    }
    configure(fd.value());
    Target t;
    t.peer = p;
    t.fd = fd.value();
    // Spread the first probes over one interval, so links are not all probed at once.
    t.dueNs = nowNs() + o_.intervalNs * static_cast<uint64_t>(targets.size() + 1 + o_.rank) /
                            static_cast<uint64_t>(o_.nranks + 1);
    targets.push_back(t);
  }
  while (!targets.empty()) {
    auto next = std::min_element(targets.begin(), targets.end(),
                                 [](const Target& a, const Target& b) { return a.dueNs < b.dueNs; });
    if (!sleepUntil(next->dueNs)) break;
    if (probeOnce(*next)) {
      std::vector<double> others;
      for (const Target& o : targets)
        if (&o != &*next) others.push_back(o.gbps);
      const uint64_t delay = nextProbeDelayNs(next->gbps, others, &next->slow, o_.intervalNs);
      next->dueNs = delay < o_.intervalNs ? nowNs() + delay : std::max(next->dueNs + o_.intervalNs, nowNs());
      continue;
    }
    close(next->fd);
    targets.erase(next);
  }
  for (Target& t : targets) close(t.fd);
}

// Answers the probes of every rank on another host: a header, its payload
// (discarded), then the header back. Non-blocking, one poll over all of them.
void LinkProber::serverLoop() {
  struct Incoming {
    int peer = -1;
    int fd = -1;
    Header header{};
    size_t headerGot = 0;
    size_t payloadLeft = 0;
    uint64_t firstNs = 0, lastNs = 0;  // ends of the first and the latest read of payload
    uint64_t spreadBytes = 0;          // payload after the first read
  };
  std::vector<Incoming> in;
  for (int p = 0; p < o_.nranks && !stop_.load(); ++p) {
    if (o_.hostOf[p] == o_.hostOf[o_.rank]) continue;
    auto fd = transport::acceptFromPeer(*o_.boot, p, kTag, Deadline::afterMs(kConnectMs), o_.abort, stop_,
                                        kConnectMs, "its link probe connection");
    if (!fd.isOk()) {
      if (!stop_.load())
        TH_INFO(log::kAttrs, "rank %d: no link probes from rank %d: %s", o_.rank, p, fd.status().message().c_str());
      continue;
    }
    configure(fd.value());
    in.push_back({p, fd.value()});
  }
  std::vector<char> sink(1 << 20);
  std::vector<struct pollfd> fds;
  auto drop = [&](size_t i, const char* why) {
    if (!stop_.load()) TH_INFO(log::kAttrs, "rank %d: link probes from rank %d end: %s", o_.rank, in[i].peer, why);
    close(in[i].fd);
    in.erase(in.begin() + static_cast<long>(i));
  };
  while (!stop_.load() && !in.empty()) {
    fds.clear();
    for (const Incoming& c : in) fds.push_back({c.fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), 100);
    if (rc <= 0) continue;
    for (size_t i = in.size(); i-- > 0;) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Incoming& c = in[i];
      bool gone = false, malformed = false;
      for (;;) {  // read what is there, answer every complete probe
        size_t want = c.headerGot < sizeof(Header) ? sizeof(Header) - c.headerGot : std::min(c.payloadLeft, sink.size());
        char* into = c.headerGot < sizeof(Header) ? reinterpret_cast<char*>(&c.header) + c.headerGot : sink.data();
        if (c.headerGot == sizeof(Header) && c.payloadLeft == 0) want = 0;
        if (want > 0) {
          ssize_t n = ::recv(c.fd, into, want, MSG_DONTWAIT);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (n <= 0) {
            gone = true;
            break;
          }
          const size_t got = static_cast<size_t>(n);
          if (c.headerGot < sizeof(Header)) {
            c.headerGot += got;
            if (c.headerGot < sizeof(Header)) continue;
            if (c.header.magic != kMagic || c.header.bytes > kMaxBytes) {
              malformed = true;
              break;
            }
            c.payloadLeft = c.header.bytes;
          } else {
            c.payloadLeft -= got;
            const uint64_t now = nowNs();
            if (c.firstNs == 0) c.firstNs = now;
            else c.spreadBytes += got;
            c.lastNs = now;
          }
          if (c.payloadLeft > 0) continue;
        }
        // A whole probe: answer it (a few bytes always fit an idle socket's buffer).
        Answer ans{kMagic, c.header.bytes, c.lastNs - c.firstNs, c.spreadBytes};
        Status st = bootstrap::sendAll(c.fd, &ans, sizeof(ans),
                                       bootstrap::Wait::forMs(kProbeTimeoutMs, o_.abort, &stopFlag_),
                                       "rank " + std::to_string(c.peer) + " (link probe answer)");
        if (!st.isOk()) {
          gone = true;
          break;
        }
        c.headerGot = 0;
        c.payloadLeft = 0;
        c.firstNs = c.lastNs = c.spreadBytes = 0;
      }
      if (malformed) drop(i, "a malformed probe header");
      else if (gone) drop(i, "the connection closed");
    }
  }
  for (Incoming& c : in) close(c.fd);
}

}  // namespace theseus::epoch
