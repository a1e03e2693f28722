// The TCP socket transport (ranks on different hosts, or THESEUS_TRANSPORT=socket).
//
// One connection = one direction between two ranks on one channel, carried by
// `nsocks` TCP sockets. The *sender* makes the sockets with
// Bootstrap::connectTo(peer, socketTag(channel, i)), which never waits for the
// peer's code, and writes a Hello on each; the *receiver* claims them with
// acceptFrom(). Accepting does wait for the peer, so a receive connection is
// returned at once and accepts on a helper thread: a program may ask for its
// receive connections before the peer asked for its send connections, in any
// order, without deadlock (tryPeek just reports "nothing yet" meanwhile).
//
// Wire format, per socket, after the Hello:
//   socket 0:   [WireHeader{magic, tag, bytes}][part 0 of the payload] per message
//   socket i>0: [part i of the payload] per message (no header; the receiver
//               learns the size from socket 0)
// A message of at least stripeMinBytes is split into nsocks parts of equal,
// page-rounded size; smaller messages go to socket 0 alone. Parts may arrive in
// any order across sockets; a message is complete when all its parts are in.
//
// Send side: a local ring of `slots` slots the executor writes into; commit
// queues the slot and tries to write it at once (non-blocking); what the
// kernel does not take is finished by the manager's SocketPump thread, so data
// keeps flowing after the executor returned to the application. A slot is free
// again once all its bytes were written.
// Receive side: reads headers and parts straight into a local ring of slots
// (driven by tryPeek/progress/waits on the executor's thread); tryPeek returns
// complete messages in order. A header with a bad magic or a size beyond the
// slot, EOF or ECONNRESET are errors naming the peer, never a crash.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/transport.h"

namespace theseus::transport {

namespace wire {
inline constexpr uint64_t kHelloMagic = 0x314f4c4c45485454ull;  // "TTHELLO1"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMessageMagic = 0x4d534854u;           // "THSM"

struct Hello {
  uint64_t magic;
  uint32_t version;
  int32_t rank;        // sender
  uint32_t channel;
  uint32_t index;      // socket index within the connection
  uint32_t nsocks;
  uint32_t reserved;
  uint64_t slotBytes;  // largest message
  uint64_t stripeMinBytes;
};
static_assert(sizeof(Hello) == 48);

struct MessageHeader {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 16);
}  // namespace wire

// Bootstrap connection tag of socket `index` of a data connection on `channel`.
uint32_t socketTag(int channel, uint32_t index);

struct SocketParams {
  int rank = 0;          // this rank
  int peer = 0;
  int channel = 0;
  uint32_t slots = 16;
  size_t slotBytes = 128 << 10;
  uint32_t nsocks = 1;
  size_t stripeMinBytes = 64 << 10;
  int sendBuf = -1;
  int recvBuf = -1;
};

class SocketPump;

// What the manager needs from socket connections beyond the public interface.
class SocketWaitable {
 public:
  virtual ~SocketWaitable() = default;
  // Descriptors whose readiness would let this connection move (POLLIN/POLLOUT).
  virtual void addPollFds(std::vector<struct pollfd>* fds) = 0;
  // True while the connection is still being set up in the background.
  virtual bool settingUp() const = 0;
};


struct SocketSendHandle {
  std::unique_ptr<SendConnection> connection;
  SocketWaitable* waitable = nullptr;
};
struct SocketRecvHandle {
  std::unique_ptr<RecvConnection> connection;
  SocketWaitable* waitable = nullptr;
};

// Connects now (bounded by `deadline` and `abort`).
Result<SocketSendHandle> connectSocketSend(bootstrap::Bootstrap& boot, const SocketParams& params, Deadline deadline,
                                           const AbortFlag* abort, ConnectionCounters* counters, SocketPump* pump);
// Returns at once; the sockets are accepted on a helper thread until `deadline`
// (Deadline::never() for lazy connections: the executor's stall timeout, abort
// and destruction bound that wait). `timeoutMs`: how long a connected peer may
// take to send its hello, and the length of a finite `deadline` for messages.
SocketRecvHandle startSocketRecv(bootstrap::Bootstrap& boot, const SocketParams& params, Deadline deadline,
                                 const AbortFlag* abort, int64_t timeoutMs, ConnectionCounters* counters, WakeFn wake,
                                 void* wakeCtx);

// The thread that finishes writes the executor left queued (one per manager,
// started with the first socket send connection).
class SocketPump {
 public:
  SocketPump(WakeFn wake, void* wakeCtx);
  ~SocketPump();
  class Client {
   public:
    virtual ~Client() = default;
    // Writes what it can; returns true when slots were freed. Thread-safe.
    virtual bool pump() = 0;
    // Adds its fds with queued output; returns false when nothing is queued.
    virtual bool addPendingFds(std::vector<struct pollfd>* fds) = 0;
  };
  void add(Client* c);
  void remove(Client* c);
  // A client has queued output the kernel did not take.
  void notify();

 private:
  void run();
  WakeFn wake_;
  void* wakeCtx_;
  int eventFd_ = -1;
  std::mutex mu_;
  std::vector<Client*> clients_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace theseus::transport
