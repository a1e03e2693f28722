// Host functions of NCCL 2.28's device API (nccl_device.h). Programs that use
// the device API compile against NVIDIA's header; these are the host entry
// points they link to. Teams are answered from the communicator (in host mode
// no peer memory is load/store accessible, so the LSA team is the rank alone);
// creating device communicators and their resources is not implemented yet and
// fails with ncclInvalidUsage and a clear last-error message.
#include "api/guard.h"
#include "comm/communicator.h"

namespace comm = theseus::comm;

// Layout of NCCL 2.28's ncclTeam (three ints, returned by value).
struct ncclTeam {
  int nRanks, rank, stride;
};
struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclDevResourceRequirements;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;

namespace {

theseus::Status notImplemented(const char* what) {
  return theseus::invalidUsage(
      "%s: the NCCL device API (nccl_device.h) is not implemented by Theseus yet; use the host API collectives",
      what);
}

ncclTeam teamOf(ncclComm_t handle, bool lsa) {
  auto c = comm::fromHandle(handle);
  if (!c.isOk()) return ncclTeam{0, -1, 1};
  comm::Communicator* cm = c.value();
  if (lsa) return ncclTeam{1, 0, 1};
  return ncclTeam{cm->nranks(), cm->rank(), 1};
}

}  // namespace

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const ncclDevCommRequirements* reqs,
         ncclDevComm* outDevComm) {
  return TH_API_GUARD({ return notImplemented("ncclDevCommCreate"); });
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const ncclDevComm* devComm) {
  return TH_API_GUARD({ return notImplemented("ncclDevCommDestroy"); });
}

NCCL_API(ncclTeam, ncclTeamWorld, ncclComm_t comm) { return teamOf(comm, false); }

NCCL_API(ncclTeam, ncclTeamLsa, ncclComm_t comm) { return teamOf(comm, true); }

// The rail team: one rank per LSA domain (here every rank is its own domain).
NCCL_API(ncclTeam, ncclTeamRail, ncclComm_t comm) { return teamOf(comm, false); }

// Team rank -> world rank: members are spaced `stride` apart around this rank's position.
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam team, int rank) {
  auto c = comm::fromHandle(comm);
  if (!c.isOk()) return -1;
  return c.value()->rank() + (rank - team.rank) * team.stride;
}

NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam team, int rank) {
  // The LSA team is the rank alone, so only this rank maps (to LSA rank 0).
  auto c = comm::fromHandle(comm);
  if (!c.isOk()) return -1;
  int world = c.value()->rank() + (rank - team.rank) * team.stride;
  return world == c.value()->rank() ? 0 : -1;
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam team, int nBarriers,
         ncclLsaBarrierHandle* outHandle, ncclDevResourceRequirements* outReq) {
  return TH_API_GUARD({ return notImplemented("ncclLsaBarrierCreateRequirement"); });
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam team, int nBarriers,
         ncclGinBarrierHandle* outHandle, ncclDevResourceRequirements* outReq) {
  return TH_API_GUARD({ return notImplemented("ncclGinBarrierCreateRequirement"); });
}

// Slots of 8-byte low-latency packets (4 payload bytes each) for maxElts elements of maxEltSize bytes.
NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  if (maxElts <= 0 || maxEltSize <= 0) return 0;
  return maxElts * ((maxEltSize + 3) / 4);
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, ncclLLA2AHandle* outHandle,
         ncclDevResourceRequirements* outReq) {
  return TH_API_GUARD({ return notImplemented("ncclLLA2ACreateRequirement"); });
}
