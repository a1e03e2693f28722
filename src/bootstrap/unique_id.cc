#include "bootstrap/unique_id.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "common/log.h"

namespace theseus::bootstrap {
namespace {

constexpr size_t kAddrOffset = 8;
constexpr size_t kAddrBytes = 28;
constexpr size_t kTagOffset = 36;
constexpr size_t kCheckOffset = 40;
constexpr char kTag[4] = {'T', 'H', 'I', 'D'};

}  // namespace

uint64_t randomU64() {
  uint64_t v = 0;
  while (v == 0 || v == kEnvMagic) {
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
      // No getrandom: mix time and pid (ids only need to differ, not be secret).
      v = wire::hashValue(nowNs(), static_cast<uint64_t>(getpid()) ^ v);
    }
  }
  return v;
}

void encodeRootId(const RootId& id, ncclUniqueId* out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, &id.magic, sizeof(id.magic));
  memcpy(out->internal + kAddrOffset, id.addr.get(), std::min<size_t>(id.addr.length(), kAddrBytes));
  memcpy(out->internal + kTagOffset, kTag, sizeof(kTag));
  uint64_t check = wire::hashBytes(out->internal, kCheckOffset);
  memcpy(out->internal + kCheckOffset, &check, sizeof(check));
}

Result<RootId> decodeRootId(const ncclUniqueId& id) {
  uint64_t check;
  memcpy(&check, id.internal + kCheckOffset, sizeof(check));
  if (memcmp(id.internal + kTagOffset, kTag, sizeof(kTag)) != 0 || check != wire::hashBytes(id.internal, kCheckOffset))
    return invalidArgument("the unique id is not valid (not made by this library's ncclGetUniqueId, or corrupted)");
  RootId out;
  memcpy(&out.magic, id.internal, sizeof(out.magic));
  sockaddr_storage ss{};
  memcpy(&ss, id.internal + kAddrOffset, kAddrBytes);
  out.addr = SockAddr::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), kAddrBytes);
  if (out.magic == 0 || !out.addr.valid() || out.addr.port() == 0)
    return invalidArgument("the unique id holds no usable root address");
  return out;
}

uint64_t hashIds(const ncclUniqueId* ids, int nIds) {
  uint64_t h = 0x5448534944530000ull;
  for (int i = 0; i < nIds; ++i) h = wire::hashBytes(ids[i].internal, kCheckOffset + 8, h);
  return h;
}

int rootOfRank(int rank, int nranks, int nRoots) {
  int base = nranks / nRoots, extra = nranks % nRoots;
  int big = extra * (base + 1);
  if (rank < big) return rank / (base + 1);
  return extra + (rank - big) / base;
}

int firstRankOfRoot(int root, int nranks, int nRoots) {
  int base = nranks / nRoots, extra = nranks % nRoots;
  return root < extra ? root * (base + 1) : extra * (base + 1) + (root - extra) * base;
}

int ranksOfRoot(int root, int nranks, int nRoots) {
  int base = nranks / nRoots, extra = nranks % nRoots;
  return base + (root < extra ? 1 : 0);
}

Status createUniqueId(ncclUniqueId* out, bool ignoreCommIdEnv) {
  if (out == nullptr) return invalidArgument("uniqueId is NULL");
  raiseOpenFileLimit();
  RootId id;
  if (std::string env = ignoreCommIdEnv ? std::string() : commIdFromEnv(); !env.empty()) {
    int family;
    TH_ASSIGN(family, socketFamilyFromEnv());
    auto addr = SockAddr::parse(env, family);
    if (!addr.isOk()) return addr.status().withContext("NCCL_COMM_ID");
    if (addr.value().port() == 0) return invalidArgument("NCCL_COMM_ID='%s' needs a non-zero port", env.c_str());
    id.magic = kEnvMagic;
    id.addr = addr.value();
    encodeRootId(id, out);
    TH_INFO(log::kBootstrap, "ncclGetUniqueId: NCCL_COMM_ID=%s (root started by rank 0's init)", env.c_str());
    return Status::ok();
  }
  NetInterface ni;
  TH_ASSIGN(ni, bootstrapInterface());
  id.magic = randomU64();
  int fd;
  TH_ASSIGN(fd, listenOn(ni.addr, &id.addr));
  TH_CHECK(startRoot(fd, id.magic, id.addr, /*lingerOnFailure=*/true));
  encodeRootId(id, out);
  TH_INFO(log::kBootstrap, "ncclGetUniqueId: root listening on %s", id.addr.toString().c_str());
  return Status::ok();
}

}  // namespace theseus::bootstrap
