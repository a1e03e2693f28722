// The shared-memory transport of one communicator (ranks on one host).
//
// ShmDomain owns this rank's inbox (see shm_layout.h) and the mappings of the
// local peers' inboxes. A send connection writes into the FIFO for
// (this rank, channel) inside the *peer's* inbox and rings the peer's doorbell;
// a receive connection reads the FIFO for (peer, channel) inside *this rank's*
// inbox and rings the peer's doorbell when it releases a slot. Connections are
// purely local operations on memory mapped at communicator creation, so they
// are made lazily in any order without talking to the peer.
//
// Set-up (TransportManager drives it, collectively):
//   1. every rank creates its inbox (named "theseus-<commHash>-r<rank>" in
//      /dev/shm, or a memfd when /dev/shm is unusable) and allGathers its locator;
//   2. every rank maps its local peers' inboxes and checks their headers;
//   3. a second allGather says which mappings worked (it is also the barrier
//      after which no one still needs the names), then every rank unlinks its
//      inbox name: from here on a crash leaves nothing in /dev/shm.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/shm/peer_liveness.h"
#include "transport/shm/region_cache.h"
#include "transport/shm/shm_fifo.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm_segment.h"
#include "transport/transport.h"

namespace theseus::transport {

struct ShmDomainParams {
  uint64_t commHash = 0;
  int rank = 0;
  int localIndex = 0;   // index of `rank` in the host's local ranks
  int nLocal = 1;
  int nChannels = 1;
  uint32_t slots = 8;
  size_t slotBytes = 128 << 10;
  const char* nameSuffix = "";  // inboxes of a second domain on the same communicator ("-dev")
};

struct ShmPeerInfo {
  int rank = -1;
  int localIndex = -1;
  int pid = 0;
  bool sameProcess = false;  // same address space: direct messages may point anywhere
  bool directOk = false;     // the peer can map this rank's shared regions
  bool checkLiveness = false;
};

class ShmDomain {
 public:
  static Result<std::unique_ptr<ShmDomain>> create(const ShmDomainParams& params);
  ~ShmDomain();

  const std::string& locator() const { return inbox_->locator(); }
  // Bytes of this rank's inbox (the FIFOs peers write to it).
  size_t inboxBytes() const { return inbox_->size(); }
  DoorbellWord* bell() { return &header_->bell; }
  // Maps a peer's inbox and validates it.
  Status mapPeer(const ShmPeerInfo& info, const std::string& locator);
  bool hasPeer(int rank) const;
  void dropPeer(int rank);
  void setDirectOk(int rank, bool ok);
  void unlinkOwn() { inbox_->unlinkName(); }

  Result<std::unique_ptr<SendConnection>> connectSend(int peer, int channel, ConnectionCounters* counters,
                                                      bool useDirect);
  // The FIFOs themselves (pages populated), for users other than the connection objects.
  // `withData` false: the data pages stay unallocated (the device FIFOs whose slots are in GPU memory).
  Result<shm::FifoView> sendFifo(int peer, int channel, bool withData = true);
  Result<shm::FifoView> recvFifo(int peer, int channel, bool withData = true);
  // Bytes of the FIFO data area of `peer`'s inbox, or of this rank's own for -1
  // (the geometry of a device inbox, device_inbox.h).
  size_t dataAreaBytes(int peer) const;
  // A device inbox's bytes: the data area, then a control block per FIFO (FifoView::controlAreaOffset).
  size_t deviceInboxBytes(int peer) const;
  // The mapping holding the FIFOs to `peer` (its inbox) or from it (this rank's inbox).
  std::pair<void*, size_t> segmentOf(int peer, bool send) const;
  Result<std::unique_ptr<RecvConnection>> connectRecv(int peer, int channel, ConnectionCounters* counters,
                                                      RegionCache* regions);

 private:
  struct Peer;
  explicit ShmDomain(const ShmDomainParams& p);
  Peer* findPeer(int rank) const;

  ShmDomainParams params_;
  std::unique_ptr<ShmSegment> inbox_;
  shm::InboxHeader* header_ = nullptr;
  // Own geometry, kept here: peers can write the shared header.
  size_t controlOffset_ = 0, controlStride_ = 0, dataOffset_ = 0, dataStride_ = 0;
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace theseus::transport
