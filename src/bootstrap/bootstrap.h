// Bootstrap: how the ranks of one communicator find each other and talk out of
// band, before and beside the data path.
//
// Creation from unique ids (ncclCommInitRank*): the id holds a random magic and
// the TCP address of a root listener started by ncclGetUniqueId (or, with
// NCCL_COMM_ID, by rank 0's init). Every rank opens its own listen socket,
// reports {rank, nranks, host identity, pid, device, listen address} to the
// root, and receives the whole table back. The root checks consistency (same
// nranks, no duplicate ranks), and when ranks are missing at the timeout tells
// everyone who arrived which ranks never came. Then every rank connects a
// control link to rank 0, the leader.
//
// Creation of a child (split, shrink) reuses the parent: members exchange new
// listen addresses through the parent (or, for shrink, through the surviving
// leader's listener), so no unique id is needed.
//
// The leader control channel (rank 0 <-> every rank) carries
//  * out-of-band collectives: allGather and barrier, called by all ranks in
//    the same order (star through the leader), bounded by timeout and abort;
//  * asynchronous typed messages for the control plane (attribute snapshots up,
//    epoch leases and decisions down), delivered to handlers on a per-comm
//    control thread;
//  * liveness: a rank leaving cleanly says BYE; a control link that breaks
//    without BYE marks that rank failed and the leader tells the others.
//
// Data connections (TCP transport) are made with connectTo/acceptFrom: the
// control thread accepts every incoming connection on the rank's listen socket,
// checks the comm magic, and parks data connections until acceptFrom claims
// them, so two ranks can connect to each other in any order without deadlock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "nccl.h"

namespace theseus::bootstrap {

// What every rank learns about every other one at creation.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  int cudaDev = -1;
  uint64_t hostHash = 0;       // equal <=> same host (hostname, boot id, network namespace, or NCCL_HOSTID)
  uint64_t machineHash = 0;    // equal <=> same kernel, so the same cores (host_identity.h)
  std::string hostname;
  std::string listenAddress;   // "ip:port" of this rank's listen socket for this communicator
  bool usesCuda = false;       // the process loaded CUDA and sees a device (InitOptions::usesCuda)
  uint64_t gpuHash = 0;        // the communicator's GPU by its PCI bus id (InitOptions::gpuHash), 0: none
  uint8_t deviceSetting = 0;   // THESEUS_DEVICE_EXECUTOR as this rank read it (InitOptions::deviceSetting)
};

// Control-plane message types. Values below 16 are reserved for the bootstrap itself.
enum class MsgType : uint16_t {
  kAttributes = 16,   // rank -> leader: attribute snapshot (src/attrs)
  kEpoch = 17,        // leader <-> rank: leases, prepare, ack, commit (src/epoch)
  kOpFailure = 18,    // rank -> leader -> every rank: an operation failed there (comm/failure_reports.h)
  kUser = 32,         // first free value for later modules
};

struct InitOptions {
  int64_t timeoutMs = 0;        // THESEUS_BOOTSTRAP_TIMEOUT_MS when 0
  int cudaDev = -1;             // reported in PeerInfo
  bool usesCuda = false;        // reported in PeerInfo (what THESEUS_DEVICE_EXECUTOR=auto decides by)
  uint64_t gpuHash = 0;         // reported in PeerInfo: which ranks of a host share a GPU
  uint8_t deviceSetting = 0;    // reported in PeerInfo: every rank must have the same (opaque here)
  const AbortFlag* abort = nullptr;  // ncclCommAbort from another thread unblocks init
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Identical on all ranks of the communicator; differs between communicators.
  virtual uint64_t commHash() const = 0;
  virtual const std::vector<PeerInfo>& peers() const = 0;
  // Ranks on this rank's host, in rank order, and this rank's index among them.
  virtual const std::vector<int>& localRanks() const = 0;
  virtual int localRank() const = 0;
  virtual int nodeCount() const = 0;

  // Out-of-band collectives (all ranks, same order). Contributions may differ in size.
  virtual Status allGather(const std::string& mine, std::vector<std::string>* all) = 0;
  virtual Status barrier() = 0;

  // Asynchronous control messages. Handlers run on the control thread and must not block.
  using Handler = std::function<void(int fromRank, std::string_view payload)>;
  virtual void setHandler(MsgType type, Handler handler) = 0;
  // Non-leader: to the leader. Leader: delivered to its own handler.
  virtual Status sendToLeader(MsgType type, std::string_view payload) = 0;
  // Leader only: to one rank (itself included, delivered locally).
  virtual Status sendToRank(int rank, MsgType type, std::string_view payload) = 0;

  // Called on the control thread when a peer's control link breaks without BYE
  // (on the leader) or when the leader reports a failed rank (elsewhere). One callback
  // per listener: the epoch service and the communicator's asynchronous error each
  // have theirs (null removes it).
  enum class FailureListener { kEpochs, kCommunicator };
  virtual void setPeerFailureCallback(std::function<void(int rank, const Status& why)> callback,
                                      FailureListener listener = FailureListener::kEpochs) = 0;
  // Ranks known to have failed so far, in the order this rank learnt of them: the leader's
  // order of detection as it relayed them, so the first is the same on every rank.
  virtual std::vector<int> failedRanks() const = 0;
  // A child communicator's (split, shrink) rank in its parent; -1 elsewhere. Messages name both,
  // since users know their processes by the parent's ranks.
  virtual int parentRankOf(int rank) const { return -1; }
  // Ranks that left cleanly (destroyed their communicator, or exited) so far.
  virtual std::vector<int> departedRanks() const { return {}; }
  // Called on the control thread when a peer leaves cleanly (its BYE); null removes it. A plan
  // still waiting on that peer can never finish: device kernels learn of it through this.
  virtual void setPeerDepartureCallback(std::function<void(int rank)> callback) { (void)callback; }

  // TCP data connections to/from a peer; `tag` distinguishes several per pair
  // (channel, purpose). The returned fd is connected, blocking, owned by the caller.
  virtual Result<int> connectTo(int peer, uint32_t tag, Deadline deadline) = 0;
  virtual Result<int> acceptFrom(int peer, uint32_t tag, Deadline deadline) = 0;

  // Leaves cleanly (BYE) and stops the control thread. Idempotent; the destructor calls it.
  virtual void close() = 0;
  // Leaves without BYE, so peers see this rank fail (ncclCommAbort). Idempotent.
  virtual void abandon() { close(); }
};

// ncclGetUniqueId: with NCCL_COMM_ID set, encodes that address (no listener);
// otherwise starts a root listener thread for one communicator creation.
// `ignoreCommIdEnv` always starts a root (ncclCommGetUniqueId: the fixed
// NCCL_COMM_ID address belongs to the first creation, not to a later one).
Status createUniqueId(ncclUniqueId* out, bool ignoreCommIdEnv = false);

// ncclCommInitRank / ncclCommInitRankScalable (nIds roots).
Result<std::unique_ptr<Bootstrap>> createFromUniqueIds(const ncclUniqueId* ids, int nIds, int rank, int nranks,
                                                       const InitOptions& options);

// A child communicator of `parent` made of `members` (parent ranks, in child rank order).
// Every member calls it with the same list and `childId` (identical on members; e.g. a
// split counter and colour); members must all be alive. Used by split and shrink.
Result<std::unique_ptr<Bootstrap>> createChild(Bootstrap& parent, const std::vector<int>& members, uint64_t childId,
                                               const InitOptions& options);

}  // namespace theseus::bootstrap
