// NCCL profiler plugins (NCCL_PROFILER_PLUGIN, ncclProfiler_v6 / _v5).
//
// The library is loaded once per process by NCCL's rules
// (common/nccl_plugins.h); init() runs per communicator and returns the event
// types it wants (eActivationMask, which NCCL_PROFILE_EVENT_MASK seeds). A
// communicator whose plugin enables nothing costs one null check per
// operation. Events Theseus emits, and where (comm/profiling.cc):
//
//   GroupApi      an explicit ncclGroupStart..ncclGroupEnd, per communicator
//                 that queues an operation in it (groupDepth = the nesting at
//                 that time); states GroupStartApiStop when it joins,
//                 GroupEndApiStart when the outermost ncclGroupEnd launches.
//   CollApi/P2pApi  one per collective / send / recv call (parent: GroupApi);
//                 stopped when the call returns.
//   Group         one per launch of a communicator's operations.
//   Coll / P2p    one per operation of the launch (parent: its CollApi/P2pApi
//                 event when enabled, else the Group; parentGroup: the Group),
//                 algo = the schedule that ran ("ring(channels=2)"), proto
//                 "Simple", nChannels = the schedule's channels, nWarps 0.
//   KernelLaunch  the executor's run of the communicator's lane (parent: the
//                 GroupApi, or the CollApi of an ungrouped call).
//   ProxyOp       one per connection a plan uses (peer, channel, direction),
//                 nSteps = messages over it, chunkSize = the slice size
//                 (parent: the Coll/P2p event).
// Not emitted: ProxyStep, ProxyCtrl, KernelCh, NetPlugin and the v6 copy-engine
// events - Theseus has no proxy thread, kernel channels or net plugin whose
// events they describe, and a per-message callback would cost the hot path.
//
// A plugin error from startEvent() is logged once and the event dropped; a
// plugin never fails a collective (NCCL ignores them too).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "telemetry/nccl_profiler_abi.h"

namespace theseus::telemetry {

class ProfilerSession {
 public:
  struct Identity {
    uint64_t commId = 0;
    std::string commName;
    int nnodes = 1;
    int nranks = 1;
    int rank = 0;
  };
  // The session for one communicator: null when no profiler plugin is
  // configured or its init() enables no event. An error when a plugin is named
  // but unusable (not found, wrong ABI, init failure): the caller WARNs and
  // continues without it, as NCCL does.
  static Result<std::unique_ptr<ProfilerSession>> open(const Identity& who);
  // The same with an explicit NCCL_PROFILER_PLUGIN value (tests).
  static Result<std::unique_ptr<ProfilerSession>> open(const std::string& value, const Identity& who);
  ~ProfilerSession();  // finalize()

  bool wants(uint64_t type) const { return (mask_ & type) != 0; }
  int rank() const { return rank_; }
  // startEvent() with d.type set; null when the type is not enabled or the plugin failed.
  void* start(ncclProfilerEventDescr_v6_t& d);
  void stop(void* handle);
  void record(void* handle, ncclProfilerEventState_v6_t state, ncclProfilerEventStateArgs_v6_t* args = nullptr);

  const std::string& pluginName() const;
  struct Plugin;  // a loaded library (nccl_profiler.cc)

 private:
  ProfilerSession() = default;
  static Result<std::unique_ptr<ProfilerSession>> open(const std::string& value, bool set, const Identity& who);
  std::shared_ptr<Plugin> plugin_;
  void* context_ = nullptr;
  int mask_ = 0;
  int rank_ = 0;
  bool warned_ = false;
};

}  // namespace theseus::telemetry
