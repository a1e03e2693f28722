// FdMailbox: file descriptors passed between the local processes of one
// communicator, for device memory shared as POSIX file descriptors
// (device/vmm.h; shm/device_exports.h sends and takes them).
//
// Each rank binds an AF_UNIX datagram socket in the abstract namespace, named
// from the communicator's hash and its rank, so a peer needs no locator to
// reach it and nothing is left in the filesystem when a process dies. A
// descriptor travels as SCM_RIGHTS with a note naming it: sender rank, export
// entry, generation, size. Sending never blocks: a full receive queue (Linux
// keeps net.unix.max_dgram_qlen datagrams, often 10) leaves the descriptor
// with the sender, which retries (send again later). The receiver drains its
// queue when it looks for a descriptor, keeps what arrived until taken, drops
// notes that are not for this communicator, and holds at most kMaxHeld
// descriptors (the oldest are closed first), so a stray sender cannot exhaust
// its descriptors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace theseus::transport {

class FdMailbox {
 public:
  struct Note {
    int32_t fromRank = -1;
    uint32_t entry = 0;
    uint64_t generation = 0;
    uint64_t bytes = 0;
  };
  static constexpr size_t kMaxHeld = 256;

  // Binds rank `rank`'s mailbox of communicator `commHash`.
  static Result<std::unique_ptr<FdMailbox>> open(uint64_t commHash, int rank);
  ~FdMailbox();  // closes the socket and every descriptor still held
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  // Sends a duplicate of `fd` with `note` to rank `toRank`'s mailbox. false: its queue is full (try
  // again later); an error when the peer has no mailbox or the send fails otherwise.
  Result<bool> send(int toRank, const Note& note, int fd);
  // The descriptor that came with a note matching (fromRank, entry, generation), now the caller's
  // (it closes it); -1 when none arrived yet. Older generations of that entry are closed.
  int take(int fromRank, uint32_t entry, uint64_t generation, uint64_t* bytes);

 private:
  FdMailbox() = default;
  void drain();
  static std::string nameOf(uint64_t commHash, int rank);

  struct Held {
    Note note;
    int fd = -1;
  };
  uint64_t commHash_ = 0;
  int rank_ = -1;
  int sock_ = -1;
  std::vector<Held> held_;
};

}  // namespace theseus::transport
