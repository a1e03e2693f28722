#include "comm/profiling.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/communicator.h"
#include "exec/plan.h"

namespace theseus::comm {
namespace {

using telemetry::ProfilerSession;

// NCCL's spelling of function and datatype names in profiler events.
const char* funcName(const OpDesc& op) {
  if (op.kind == OpDesc::Kind::kSend) return "Send";
  if (op.kind == OpDesc::Kind::kRecv) return "Recv";
  switch (op.collective) {
    case schedule::Collective::kBroadcast: return "Broadcast";
    case schedule::Collective::kReduce: return "Reduce";
    case schedule::Collective::kAllGather: return "AllGather";
    case schedule::Collective::kReduceScatter: return "ReduceScatter";
    case schedule::Collective::kAllReduce: return "AllReduce";
    case schedule::Collective::kAlltoAll: return "AlltoAll";
    case schedule::Collective::kScatter: return "Scatter";
    case schedule::Collective::kGather: return "Gather";
  }
  return "?";
}

const char* typeName(ncclDataType_t t) {
  static const char* const names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                      "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                      "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[i] : "?";
}

ncclProfilerEventDescr_v6_t descr(uint64_t type, void* parent) {
  ncclProfilerEventDescr_v6_t d;
  memset(&d, 0, sizeof(d));
  d.type = type;
  d.parentObj = parent;
  return d;
}

uint8_t channelsOf(const exec::Plan& p) {
  int n = 0;
  for (const auto& c : p.conns) n = std::max(n, c.channel + 1);
  return static_cast<uint8_t>(std::max(n, 1));
}

}  // namespace

void profileGroupJoinedSlow(CommOps& w, int depth) {
  ProfilerSession* s = w.comm->profiler();
  if (s == nullptr) return;
  auto d = descr(ncclProfileGroupApi, nullptr);
  d.groupApi.groupDepth = depth;
  w.groupApiEvent = s->start(d);
  s->record(w.groupApiEvent, ncclProfilerGroupStartApiStop);
}

void profileGroupEndStartsSlow(CommOps& w) {
  if (ProfilerSession* s = w.comm->profiler()) s->record(w.groupApiEvent, ncclProfilerGroupEndApiStart);
}

void profileGroupDoneSlow(CommOps& w) {
  if (ProfilerSession* s = w.comm->profiler()) s->stop(w.groupApiEvent);
  w.groupApiEvent = nullptr;
}

void profileApiStartSlow(Communicator* comm, OpDesc& op, void* groupApiEvent) {
  ProfilerSession* s = comm->profiler();
  if (s == nullptr) return;
  const bool coll = op.kind == OpDesc::Kind::kCollective;
  auto d = descr(coll ? ncclProfileCollApi : ncclProfileP2pApi, groupApiEvent);
  if (coll) {
    d.collApi.func = funcName(op);
    d.collApi.count = op.count;
    d.collApi.datatype = typeName(op.type);
    d.collApi.root = op.root;
    d.collApi.stream = op.stream;
  } else {
    d.p2pApi.func = funcName(op);
    d.p2pApi.count = op.count;
    d.p2pApi.datatype = typeName(op.type);
    d.p2pApi.stream = op.stream;
  }
  op.apiEvent = s->start(d);
}

void profileApiStopSlow(Communicator* comm, OpDesc& op) {
  if (ProfilerSession* s = comm->profiler()) s->stop(op.apiEvent);
}

void profileLaunchStart(CommOps& w, const exec::Lane& lane, LaunchEvents* out) {
  ProfilerSession* s = w.comm->profiler();
  if (s == nullptr) return;
  auto g = descr(ncclProfileGroup, nullptr);
  out->group = s->start(g);
  // Operations map onto plans as Engine::lower cut them: one plan per
  // collective, one per run of consecutive sends and receives.
  out->ops.assign(w.ops.size(), nullptr);
  size_t planIndex = 0;
  for (size_t i = 0; i < w.ops.size();) {
    const exec::Plan* plan = planIndex < lane.plans.size() ? lane.plans[planIndex] : nullptr;
    size_t end = i + 1;
    if (w.ops[i].kind != OpDesc::Kind::kCollective)
      while (end < w.ops.size() && w.ops[end].kind != OpDesc::Kind::kCollective) ++end;
    for (size_t k = i; k < end; ++k) {
      OpDesc& op = w.ops[k];
      void* parent = op.apiEvent != nullptr ? op.apiEvent : out->group;
      if (op.kind == OpDesc::Kind::kCollective) {
        auto d = descr(ncclProfileColl, parent);
        d.coll.seqNumber = plan ? plan->seq : 0;
        d.coll.func = funcName(op);
        d.coll.sendBuff = op.sendbuff;
        d.coll.recvBuff = op.recvbuff;
        d.coll.count = op.count;
        d.coll.root = op.root;
        d.coll.datatype = typeName(op.type);
        d.coll.nChannels = plan ? channelsOf(*plan) : 1;
        d.coll.nWarps = 0;
        d.coll.algo = plan ? plan->scheduleName : "?";
        d.coll.proto = "Simple";
        d.coll.parentGroup = out->group;
        out->ops[k] = s->start(d);
      } else {
        auto d = descr(ncclProfileP2p, parent);
        d.p2p.func = funcName(op);
        d.p2p.buff = op.kind == OpDesc::Kind::kSend ? const_cast<void*>(op.sendbuff) : op.recvbuff;
        d.p2p.datatype = typeName(op.type);
        d.p2p.count = op.count;
        d.p2p.peer = op.peer;
        d.p2p.nChannels = plan ? channelsOf(*plan) : 1;
        d.p2p.parentGroup = out->group;
        out->ops[k] = s->start(d);
      }
    }
    // ProxyOp: one per connection of the plan, under the operation that uses it.
    if (plan != nullptr && s->wants(ncclProfileProxyOp)) {
      for (const exec::PlanConn& c : plan->conns) {
        void* owner = out->ops[i];
        for (size_t k = i; k < end && w.ops[i].kind != OpDesc::Kind::kCollective; ++k) {
          const bool isSend = w.ops[k].kind == OpDesc::Kind::kSend;
          if (w.ops[k].peer == c.peer && isSend == c.isSend) {
            owner = out->ops[k];
            break;
          }
        }
        auto d = descr(ncclProfileProxyOp, owner);
        d.proxyOp.pid = getpid();
        d.proxyOp.channelId = c.channel;
        d.proxyOp.peer = c.peer;
        d.proxyOp.nSteps = static_cast<int>(c.nsteps * plan->rounds);
        d.proxyOp.chunkSize = static_cast<int>(std::min<size_t>(plan->sliceBytes, INT32_MAX));
        d.proxyOp.isSend = c.isSend ? 1 : 0;
        void* h = s->start(d);
        s->record(h, ncclProfilerProxyOpInProgress_v4);
        out->proxies.push_back(h);
      }
    }
    ++planIndex;
    i = end;
  }
  void* launchParent = w.groupApiEvent != nullptr ? w.groupApiEvent : (w.ops.empty() ? nullptr : w.ops[0].apiEvent);
  auto k = descr(ncclProfileKernelLaunch, launchParent);
  k.kernelLaunch.stream = w.ops.empty() ? nullptr : w.ops[0].stream;
  out->kernel = s->start(k);
}

void profileLaunchStop(Communicator* comm, LaunchEvents* events) {
  ProfilerSession* s = comm->profiler();
  if (s == nullptr) return;
  s->stop(events->kernel);
  for (void* h : events->proxies) s->stop(h);
  for (void* h : events->ops) s->stop(h);
  s->stop(events->group);
  *events = LaunchEvents{};
}

}  // namespace theseus::comm
