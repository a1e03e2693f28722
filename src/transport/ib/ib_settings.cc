#include "transport/ib/ib_settings.h"

#include <strings.h>
#include <sys/socket.h>

#include <algorithm>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::transport::ib {
namespace {

const BoolKnob kDisable("NCCL_IB_DISABLE", false, "1 disables the InfiniBand/RoCE network (IB); TCP sockets instead");
const StringKnob kHca("NCCL_IB_HCA", nullptr,
                      "HCAs and ports the IB network uses, NCCL's syntax: comma list of name[:port] prefixes; "
                      "'^' excludes, '=' matches names exactly");
const IntKnob kGidIndex("NCCL_IB_GID_INDEX", -1,
                        "GID index for RoCE (and global routing on IB); -1: the first GID of "
                        "NCCL_IB_ROCE_VERSION_NUM's type and NCCL_IB_ADDR_FAMILY's family");
const IntKnob kRoceVersion("NCCL_IB_ROCE_VERSION_NUM", 2, "RoCE version of the GID chosen when NCCL_IB_GID_INDEX=-1");
const StringKnob kAddrFamily("NCCL_IB_ADDR_FAMILY", "AF_INET",
                             "Address family of the RoCE GID chosen when NCCL_IB_GID_INDEX=-1 (AF_INET, AF_INET6)");
const IntKnob kTimeout("NCCL_IB_TIMEOUT", 20, "IB QP timeout: 4.096 us x 2^value before a retry (1..31)");
const IntKnob kRetryCount("NCCL_IB_RETRY_CNT", 7, "IB QP retry count (0..7)");
const IntKnob kServiceLevel("NCCL_IB_SL", 0, "IB service level of the QPs (0..15)");
const IntKnob kTrafficClass("NCCL_IB_TC", 0, "IB/RoCE traffic class of the QPs (0..255)");
const IntKnob kPkey("NCCL_IB_PKEY", 0, "IB partition key index of the QPs");
const IntKnob kQpsPerConnection("NCCL_IB_QPS_PER_CONNECTION", 1,
                                "QPs per IB connection; messages are split across them (1..16)");

const BoolKnob kGdrFlushDisable("NCCL_GDR_FLUSH_DISABLE", false,
                                 "1: the IB network's iflush does nothing, so GPUDirect RDMA receives reach the GPU "
                                 "without the read-back that orders the NIC's writes before the proxy's flag "
                                 "(safe only where the platform orders them itself)");

const BoolKnob kFailover("THESEUS_IB_FAILOVER", true,
                         "When the IB path of a connection fails (its port goes down, a completion fails), the "
                         "connection moves to TCP and re-sends what was not delivered, instead of failing");
const BoolKnob kFailoverHca("THESEUS_IB_FAILOVER_HCA", true,
                            "With THESEUS_IB_FAILOVER: a connection whose port fails moves on to another HCA port "
                            "of this host (one NCCL_IB_HCA allows, same link layer) after a short TCP interlude, "
                            "and back to its own port once that port is up again; off: it stays on TCP until its "
                            "own port is up");

int clamp(const IntKnob& k, int lo, int hi) {
  int64_t v = k.get();
  if (v < lo || v > hi) {
    int64_t c = std::clamp<int64_t>(v, lo, hi);
    TH_WARN("%s=%lld is out of range [%d, %d]; using %lld", k.name(), static_cast<long long>(v), lo, hi,
            static_cast<long long>(c));
    v = c;
  }
  return static_cast<int>(v);
}

IbSettings read() {
  IbSettings s;
  s.disable = kDisable.get();
  s.hca = kHca.get();
  s.gidIndex = clamp(kGidIndex, -1, 65535);
  s.roceVersion = clamp(kRoceVersion, 1, 2);
  std::string fam = kAddrFamily.get();
  s.addrFamily = strcasecmp(fam.c_str(), "AF_INET6") == 0 ? AF_INET6 : AF_INET;
  if (s.addrFamily == AF_INET && strcasecmp(fam.c_str(), "AF_INET") != 0)
    TH_WARN("NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6; using AF_INET", fam.c_str());
  s.timeout = clamp(kTimeout, 1, 31);
  s.retryCount = clamp(kRetryCount, 0, 7);
  s.serviceLevel = clamp(kServiceLevel, 0, 15);
  s.trafficClass = clamp(kTrafficClass, 0, 255);
  s.pkeyIndex = clamp(kPkey, 0, 65535);
  s.qpsPerConnection = clamp(kQpsPerConnection, 1, 16);
  s.failover = kFailover.get();
  s.failoverHca = kFailoverHca.get();
  s.gdrFlushDisable = kGdrFlushDisable.get();
  return s;
}

}  // namespace

const IbSettings& IbSettings::get() {
  static const IbSettings s = read();
  return s;
}

}  // namespace theseus::transport::ib
