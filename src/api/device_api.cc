// Host functions of NCCL's device API (nccl_device.h, 2.28 to 2.30). Programs that use
// the device API compile against NVIDIA's header; these are the host entry
// points they link to. Teams are answered from the communicator (in host mode
// no peer memory is load/store accessible, so the LSA team is the rank alone);
// creating device communicators and their resources is not implemented yet and
// fails with ncclInvalidUsage and a clear last-error message.
#include <cstring>

#include "api/guard.h"
#include "comm/communicator.h"
#include "comm/registrations.h"
#include "common/knobs.h"

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

// ---------------------------------------------------------------- NCCL 2.29 and 2.30 additions
//
// ncclCommQueryProperties reads a versioned struct (size, magic, version first,
// like ncclConfig_t) and writes only the fields the caller's layout has:
//   2.29.2-2.29.3 (40 B): rank @16, nRanks @20, cudaDev @24, nvmlDev @28,
//     deviceApiSupport @32, multimemSupport @33, ginType (1 byte) @34;
//   2.29.5 and later (56 B): ginType (int) @36, nLsaTeams @40,
//     hostRmaSupport @44, railedGinType @48.
// As in NCCL, a caller newer than the library is refused (unless
// NCCL_ENABLE_VERSION_CHECK=0), and so are versions NCCL does not accept.
// Theseus has no device API and no GIN: deviceApiSupport and multimemSupport
// are false, ginType is NONE, and every rank is its own LSA team.

namespace {

const theseus::BoolKnob kVersionCheck("NCCL_ENABLE_VERSION_CHECK", true,
                             "0: ncclCommQueryProperties accepts a struct from a header newer than the library");

constexpr unsigned kApiMagic = NCCL_API_MAGIC;
constexpr unsigned kGinTypeNone = 0;

template <typename T>
void putField(void* base, size_t size, size_t offset, T value) {
  if (offset + sizeof(T) <= size) memcpy(static_cast<char*>(base) + offset, &value, sizeof(T));
}

theseus::Status checkVersionedStruct(const char* what, unsigned magic, unsigned version) {
  if (magic != kApiMagic)
    return theseus::invalidUsage("%s: the struct was not initialised with its NCCL initializer (magic %#x, expected %#x)",
                                 what, magic, kApiMagic);
  if (version > NCCL_VERSION_CODE && kVersionCheck.get())
    return theseus::invalidUsage("%s: the struct comes from NCCL %u headers, newer than this library (%d); "
                                 "NCCL_ENABLE_VERSION_CHECK=0 accepts it", what, version, NCCL_VERSION_CODE);
  const bool accepted = (version >= 22902 && version <= 22903) || (version >= 22905 && version <= 22907) ||
                        version >= 23000;
  if (!accepted)
    return theseus::invalidUsage("%s: struct version %u is not supported (NCCL accepts 2.29.2-2.29.3, 2.29.5-2.29.7 "
                                 "and 2.30.0 up to the library's)", what, version);
  return theseus::Status::ok();
}

}  // namespace

struct ncclCommProperties;
struct ncclMultimemHandle {
  void* mcBasePtr;
};
struct ncclGinOutboxHandle;
struct ncclGinInboxA2AHandle;

NCCL_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, ncclCommProperties* props) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (props == nullptr) return theseus::invalidArgument("ncclCommQueryProperties: props is NULL");
    if (c->lifecycle() != comm::Lifecycle::kReady)
      return theseus::invalidUsage("ncclCommQueryProperties: the communicator is not ready");
    size_t size;
    unsigned magic, version;
    memcpy(&size, props, sizeof(size));
    if (size < 16) return theseus::invalidArgument("ncclCommQueryProperties: props->size %zu is too small", size);
    memcpy(&magic, reinterpret_cast<char*>(props) + 8, sizeof(magic));
    memcpy(&version, reinterpret_cast<char*>(props) + 12, sizeof(version));
    TH_CHECK(checkVersionedStruct("ncclCommQueryProperties", magic, version));
    putField<int>(props, size, 16, c->rank());
    putField<int>(props, size, 20, c->nranks());
    putField<int>(props, size, 24, c->cudaDev());
    putField<int>(props, size, 28, c->cudaDev());
    putField<bool>(props, size, 32, false);  // deviceApiSupport
    putField<bool>(props, size, 33, false);  // multimemSupport
    if (version <= 22903) {
      putField<uint8_t>(props, size, 34, kGinTypeNone);
    } else {
      putField<unsigned>(props, size, 36, kGinTypeNone);
      putField<int>(props, size, 40, c->nranks());  // nLsaTeams: every rank is its own
      putField<bool>(props, size, 44, false);        // hostRmaSupport
      putField<unsigned>(props, size, 48, kGinTypeNone);
    }
    return theseus::Status::ok();
  });
}

// Device addresses inside a window. The LSA team is the rank alone, so only
// the rank's own buffer is reachable (its address); other peers answer NULL,
// and there is no multimem (NVLS) address.
NCCL_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  return TH_API_GUARD({
    if (outPtr == nullptr) return theseus::invalidArgument("ncclGetLsaDevicePointer: outPtr is NULL");
    *outPtr = nullptr;
    comm::Window w;
    TH_ASSIGN(w, comm::windowOf(window));
    if (offset > w.size) return theseus::invalidArgument("offset %zu is past the window's %zu bytes", offset, w.size);
    if (lsaRank != 0) return theseus::invalidArgument("lsaRank %d is out of range [0, 1)", lsaRank);
    *outPtr = static_cast<char*>(w.userPtr) + offset;
    return theseus::Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  return TH_API_GUARD({
    if (outPtr == nullptr) return theseus::invalidArgument("ncclGetPeerDevicePointer: outPtr is NULL");
    *outPtr = nullptr;
    comm::Window w;
    TH_ASSIGN(w, comm::windowOf(window));
    if (offset > w.size) return theseus::invalidArgument("offset %zu is past the window's %zu bytes", offset, w.size);
    if (peer < 0 || peer >= w.nranks) return theseus::invalidArgument("peer %d is out of range [0, %d)", peer, w.nranks);
    if (peer == w.rank) *outPtr = static_cast<char*>(w.userPtr) + offset;
    return theseus::Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset, void** outPtr) {
  return TH_API_GUARD({
    if (outPtr == nullptr) return theseus::invalidArgument("ncclGetLsaMultimemDevicePointer: outPtr is NULL");
    *outPtr = nullptr;
    comm::Window w;
    TH_ASSIGN(w, comm::windowOf(window));
    return theseus::Status::ok();  // no NVLS multicast
  });
}

NCCL_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset, ncclMultimemHandle multimem,
         void** outPtr) {
  return TH_API_GUARD({
    if (outPtr == nullptr) return theseus::invalidArgument("ncclGetMultimemDevicePointer: outPtr is NULL");
    *outPtr = nullptr;
    comm::Window w;
    TH_ASSIGN(w, comm::windowOf(window));
    if (multimem.mcBasePtr == nullptr)
      return theseus::invalidArgument("ncclGetMultimemDevicePointer: multimem.mcBasePtr is NULL");
    return theseus::Status::ok();  // no NVLS multicast
  });
}

NCCL_API(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int size_log2, ncclGinOutboxHandle* outHandle,
         ncclDevResourceRequirements* outReq) {
  return TH_API_GUARD({ return notImplemented("ncclGinOutboxCreateRequirement"); });
}

NCCL_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, ncclTeam peers, int nBlocks, int size_log2,
         ncclGinInboxA2AHandle* outHandle, ncclDevResourceRequirements* outReq) {
  return TH_API_GUARD({ return notImplemented("ncclGinInboxA2ACreateRequirement"); });
}
