// DeviceExports: registered device buffers that local peers read in place
// (zero-copy), for the device executor's direct messages.
//
// Why. With device FIFOs every byte a rank sends is written into a slot of the
// receiver's GPU memory and read out again. When the sender's data sits in a
// buffer the application registered (ncclCommRegister, ncclCommWindowRegister)
// the receiver's kernel can read it where it is, through a CUDA IPC mapping of
// the allocation: one copy instead of two, and no slot traffic. The FIFO then
// carries only a header naming the data (SlotHeader kind kSlotDirectDevice:
// export entry, offset, bytes) — the protocol the host transport uses for
// shared host memory (shm_layout.h), with tables that a kernel can read.
//
// Tables, per rank and communicator, in one small shared segment every local
// peer with device FIFOs maps (named with the device inbox in ShmBackend's
// set-up round 1):
//   entries[kMaxEntries]   written by the owner: the allocations it exported
//                          (IPC handle, base and size in the owner's address
//                          space, a generation that is never reused; 0: free);
//   acks[nLocal][entries]  acks[j][e]: the generation of the owner's entry e
//                          that local peer j has mapped (written by peer j);
//   imports[nLocal][entries]  where the owner mapped peer j's entry e (base,
//                          size in the owner's address space; base 0: not
//                          mapped), written by the owner only.
// The owner's kernels read acks and imports: the executor registers the
// segment with CUDA (mapped) like the inboxes.
//
// Sharing an allocation with a peer in another process: cudaMalloc/cuMemAlloc
// memory through a legacy CUDA IPC handle in the entry; memory of CUDA's VMM
// API (ncclMemAlloc's, PyTorch's expandable segments), which legacy IPC
// refuses, through a file descriptor of its physical allocation (device/vmm.h)
// that the owner passes to each such peer's mailbox (fd_mailbox.h) when it
// exports, and again at its later refreshes while a peer's queue was full. A
// peer that sees the generation before the descriptor arrived maps it at a
// later refresh. A peer in the same process uses the address as is.
//
// Protocol. The owner exports when a device buffer is registered: fields, then
// the generation (release), then bumps `changes`. A peer maps lazily: each time
// its executor runs a group, refresh() looks at every peer's `changes` (one
// load), maps what is new (cuIpcOpenMemHandle; the address itself for a
// thread of this process on the same device), writes its imports, and only
// then publishes acks[j][e] = generation (release). A sender's kernel sends a
// piece directly only when the receiver's ack for that entry equals the
// generation it lowered with (acquire); the receiver's kernel, which acquires
// the message's head after the sender acquired the ack, sees its own imports
// entry (happens-before is transitive). Otherwise the piece goes through a
// slot as before, so the first groups after a registration copy, the next ones
// read in place. Withdrawing (deregistration) clears the generation; peers
// unmap at their next refresh and clear their ack. A sender's plan finishes a
// round only once its direct messages were released (the receiver read them),
// so the buffer is never reused or deregistered under a reader.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace theseus::transport {

class ShmSegment;
class FdMailbox;

class DeviceExports {
 public:
  static constexpr uint32_t kMaxEntries = kMaxDeviceExports;

  // This rank's tables (a shared segment for `nLocal` local ranks).
  static Result<std::unique_ptr<DeviceExports>> create(uint64_t commHash, int rank, int localIndex, int nLocal,
                                                       int pid, uint64_t processCookie);
  ~DeviceExports();
  DeviceExports(const DeviceExports&) = delete;
  DeviceExports& operator=(const DeviceExports&) = delete;

  // What set-up round 1 publishes: one line, no spaces.
  const std::string& locator() const { return locator_; }
  // Maps local peer `rank`'s tables (from its locator); `device` is this rank's CUDA device.
  Status openPeer(int rank, int localIndex, const std::string& locator);
  bool hasPeer(int rank) const { return findPeer(rank) != nullptr; }
  // Removes the segment's name once every peer mapped it (set-up round 2).
  void unlinkOwn();

  // Owner side. Exports the device allocation holding [p, p + bytes) under
  // registration `id` (the same allocation registered twice shares an entry).
  Status exportBuffer(uint64_t id, const void* p, size_t bytes);
  // Withdraws registration `id` (no-op when it was never exported).
  void withdraw(uint64_t id);
  // The export holding [p, p + bytes) (entry -1: none). Cheap when nothing is exported.
  DeviceExportRef find(const void* p, size_t bytes) const;

  // Importer side: maps what peers exported since the last call and acks it.
  void refresh();

  // For device plans: the acks local peer `rank` wrote for this rank's entries
  // (kMaxEntries words), and this rank's mappings of `rank`'s entries.
  uint64_t* acksFrom(int rank) const;
  const DeviceImport* importsOf(int rank) const;
  // The memory kernels read (acks, imports): this rank's shared segment.
  std::pair<void*, size_t> segment() const;

 private:
  struct Header;
  struct Entry;
  struct Peer;
  struct Registration {
    uint64_t id = 0;
    uint32_t entry = 0;
    const char* begin = nullptr;
    size_t bytes = 0;
  };
  DeviceExports() = default;
  Peer* findPeer(int rank) const;
  Entry* entries(char* base) const;
  std::atomic<uint64_t>* acks(char* base, int localIndex) const;
  DeviceImport* imports(int localIndex) const;
  void unmap(Peer& peer, uint32_t e);

  int rank_ = 0, localIndex_ = 0, nLocal_ = 0, pid_ = 0;
  uint64_t commHash_ = 0, cookie_ = 0;
  std::string locator_;
  std::unique_ptr<ShmSegment> own_;
  int device_ = -1;
  // Owner state (under mu_): registrations, references per entry, the next generation.
  mutable std::mutex mu_;
  std::vector<Registration> registrations_;
  uint32_t refs_[kMaxEntries] = {};
  uint64_t nextGeneration_ = 1;
  std::atomic<uint32_t> live_{0};  // registrations, for a cheap find()
  std::mutex importMu_;  // refresh()
  std::vector<std::unique_ptr<Peer>> peers_;  // set up before any refresh()
  // File descriptors of VMM exports (null: none can be passed, said at INFO at creation), and those
  // not yet delivered to a peer whose queue was full (under mu_).
  std::unique_ptr<FdMailbox> mailbox_;
  struct Undelivered {
    int toRank = -1;
    uint32_t entry = 0;
    uint64_t generation = 0;
    uint64_t bytes = 0;
    int fd = -1;
  };
  std::vector<Undelivered> undelivered_;
  std::atomic<bool> anyUndelivered_{false};  // !undelivered_.empty(), read without mu_ by refresh()
  void deliverLocked();
};

}  // namespace theseus::transport
