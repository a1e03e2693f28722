// DeviceInbox: the data areas of a rank's device FIFOs in GPU memory, shared
// with its local peers through CUDA IPC.
//
// A device FIFO whose pair agreed on device slots (below) lives here whole: one
// cuMemAlloc on the rank's device holds the inbox's data geometry (FIFO k's
// slots at k * dataStride) and, after it, a control block per FIFO (counters
// and slot headers at data bytes + k * controlStride, zeroed at creation), so
// the kernels' flag polls stay in GPU memory instead of crossing PCIe to the
// shared-memory inbox, which such FIFOs do not use at all. (Device FIFOs to
// ranks whose area could not be opened keep all of it in the shared-memory
// inbox, pinned and mapped.) A sender's kernel writes a slice straight into the
// receiver's GPU memory (a peer write over NVLink/PCIe P2P, or within one GPU
// for ranks sharing it) and the receiver's kernel reads and reduces it from
// its own HBM, instead of both crossing PCIe to host memory.
//
// Set-up, inside ShmBackend's two rounds: round 1 publishes locator() (the IPC
// handle, the device, the size and the address); every rank opens each local
// peer's (openPeer) and round 2 says which opens worked. A pair's direction
// uses device slots only when the sender opened the receiver's area, so both
// sides agree; otherwise it keeps the host slots of the inbox. Ranks that are
// threads of one process share addresses: the peer's pointer is used as is,
// on another device after enabling peer access to it (cuCtxEnablePeerAccess).
//
// Memory ordering is the FIFO protocol's (shm_layout.h): the sender's kernel
// fences at system scope after the payload and before the head it publishes,
// the receiver acquires the head at system scope before reading the payload.
// Teardown closes the peers' mappings before freeing its own area; a
// communicator is destroyed only once its kernels finished.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace theseus::transport {

class DeviceInbox {
 public:
  // Allocates `bytes` on the calling thread's current CUDA device, zeroes
  // [zeroFrom, bytes) (the control blocks: counters start at 0) and exports
  // it. An error when CUDA, a current device or IPC is missing (the caller then
  // keeps host slots).
  static Result<std::unique_ptr<DeviceInbox>> create(size_t bytes, size_t zeroFrom, int pid, uint64_t processCookie);
  ~DeviceInbox();
  DeviceInbox(const DeviceInbox&) = delete;
  DeviceInbox& operator=(const DeviceInbox&) = delete;

  // What round 1 publishes: one line, no spaces.
  const std::string& locator() const { return locator_; }
  char* base() const { return base_; }
  // Maps rank `rank`'s published area, which must hold at least `needBytes`.
  Status openPeer(int rank, const std::string& locator, size_t needBytes);
  // The peer's area mapped here, or nullptr.
  char* peerBase(int rank) const;

 private:
  DeviceInbox() = default;
  struct Peer {
    int rank = -1;
    char* base = nullptr;
    bool imported = false;  // opened through IPC (closed at teardown)
  };
  char* base_ = nullptr;
  int device_ = -1;
  int pid_ = 0;
  uint64_t cookie_ = 0;
  std::string locator_;
  std::vector<Peer> peers_;
};

}  // namespace theseus::transport
