// Communicator configuration: ncclConfig_t read safely (size- and
// version-aware, never past the caller's struct), defaults applied, NCCL_*
// environment overrides applied (environment wins, as in NCCL), validated.
#pragma once

#include <string>

#include "common/status.h"
#include "nccl.h"

namespace theseus::comm {

struct CommConfig {
  bool blocking = true;
  int cgaClusterSize = 4;
  int minCTAs = 1;
  int maxCTAs = 64;
  std::string netName;       // copied; empty = any
  bool splitShare = false;
  int trafficClass = NCCL_CONFIG_UNDEF_INT;
  std::string commName;      // copied
  bool collnetEnable = false;
  int ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
  bool shrinkShare = false;
  int nvlsCTAs = NCCL_CONFIG_UNDEF_INT;
  int nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT;
  bool nvlinkCentricSched = false;
  // NCCL 2.29 / 2.30 fields.
  int graphUsageMode = 2;                          // 0 no graphs, 1 one graph, 2 several or mixed
  int numRmaCtx = 1;                               // one-sided contexts
  int maxP2pPeers = NCCL_CONFIG_UNDEF_INT;         // undefined: every rank
  int graphStreamOrdering = NCCL_CONFIG_UNDEF_INT;  // undefined behaves as 1
  // NCCL_VERSION_CODE of the header the caller was built with (its config's
  // `version`; 0 without a config): decides whether it may see ncclTimeout.
  unsigned callerVersion = 0;
};

// `s` as a caller built with `cfg`'s header may see it: ncclTimeout (NCCL 2.30)
// becomes ncclRemoteError for older headers, with the same message.
Status visibleTo(const Status& s, const CommConfig& cfg);
ncclResult_t visibleTo(ncclResult_t code, const CommConfig& cfg);

// `user` may be NULL (defaults, or `inherit` when given: split/shrink).
Status parseConfig(const ncclConfig_t* user, const CommConfig* inherit, CommConfig* out);

}  // namespace theseus::comm
