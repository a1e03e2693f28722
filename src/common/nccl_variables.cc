#include "common/nccl_variables.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>

#include "common/knobs.h"
#include "common/log.h"

extern char** environ;

namespace theseus {
namespace {

// NVIDIA's names (NCCL_PARAM integers, ncclGetEnv strings and the logging
// variables of 2.28.9, and the names 2.29/2.30 added), without the prefix.
const char* const kNvidiaNames[] = {
    // 2.28.9 integers
    "ALLOC_P2P_NET_LL_BUFFERS", "BUFFSIZE", "CGA_CLUSTER_SIZE", "CHECK_POINTERS", "CHUNK_SIZE", "COLLNET_ENABLE",
    "COLLNET_NODE_THRESHOLD", "COMM_BLOCKING", "COMM_SHRINK_SHARE_RESOURCES", "COMM_SPLIT_SHARE_RESOURCES",
    "CONNECT_ROUND_MAX_PEERS", "CREATE_THREAD_CONTEXT", "CROSS_NIC", "CTA_POLICY", "CUMEM_ENABLE", "CUMEM_HOST_ENABLE",
    "DMABUF_ENABLE", "GDRCOPY_ENABLE", "GDRCOPY_FIFO_ENABLE", "GDRCOPY_FLUSH_ENABLE", "GDRCOPY_SYNC_ENABLE",
    "GDR_FLUSH_DISABLE", "GIN_COUNTER_POOL_SIZE", "GIN_ENABLE", "GIN_ERROR_QUERY_SEC", "GIN_GDAKI_NIC_HANDLER",
    "GIN_GDAKI_QP_DEPTH", "GIN_NCONTEXTS", "GIN_PROXY_QUEUE_SIZE", "GIN_SIGNAL_POOL_SIZE", "GIN_TYPE",
    "GRAPH_DUMP_FILE_RANK", "GRAPH_HELPER_DISABLE", "GRAPH_MIXING_SUPPORT", "GRAPH_REGISTER", "GROUP_CUDA_STREAM",
    "IB_ADAPTIVE_ROUTING", "IB_AR_THRESHOLD", "IB_DATA_DIRECT", "IB_DISABLE", "IB_ECE_ENABLE", "IB_FIFO_TC",
    "IB_GID_INDEX", "IB_MERGE_NICS", "IB_MERGE_VFS", "IB_MQP_RETRY_ALL", "IB_MQP_RETRY_CNT", "IB_MQP_RETRY_SLEEP_MSEC",
    "IB_PCI_RELAXED_ORDERING", "IB_PKEY", "IB_QPS_PER_CONNECTION", "IB_RETRY_CNT", "IB_RETURN_ASYNC_EVENTS",
    "IB_ROCE_VERSION_NUM", "IB_ROUTABLE_FLID_GID_INDEX", "IB_SL", "IB_SPLIT_DATA_ON_QPS", "IB_TC", "IB_TIMEOUT",
    "IB_USE_INLINE", "IB_WARN_RAIL_LOCAL", "IGNORE_CPU_AFFINITY", "IGNORE_DISABLED_P2P", "L1_SHARED_MEMORY_CARVEOUT",
    "LAUNCH_ORDER_IMPLICIT", "LAUNCH_RACE_FATAL", "LEGACY_CUDA_REGISTER", "LL128_BUFFSIZE", "LL128_C2C",
    "LL128_NTHREADS", "LL_BUFFSIZE", "LOCAL_REGISTER", "MAX_CTAS", "MAX_NCHANNELS", "MAX_NRINGS", "MAX_P2P_NCHANNELS",
    "MEM_SYNC_DOMAIN", "MIN_CTAS", "MIN_NCHANNELS", "MIN_NRINGS", "MIN_P2P_NCHANNELS", "MNNVL_CLIQUE_ID", "MNNVL_ENABLE",
    "MNNVL_RAIL_PER_HOST", "MNNVL_SCATTER_NETS_ENABLE", "MNNVL_UUID", "NCHANNELS_PER_NET_PEER", "NET_DISABLE_INTRA",
    "NET_FORCE_FLUSH", "NET_GDR_C2C", "NET_GDR_READ", "NET_OPTIONAL_RECV_COMPLETION", "NET_OVERHEAD",
    "NET_PLUGIN_REF_COUNT", "NET_SHARED_BUFFERS", "NET_SHARED_COMMS", "NSOCKS_PERTHREAD", "NTHREADS", "NVB_DISABLE",
    "NVB_PRECONNECT", "NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NVLSTREE_MAX_CHUNKSIZE", "NVLS_CHUNKSIZE", "NVLS_ENABLE",
    "NVLS_NCHANNELS", "NVTX_DISABLE", "OOB_NET_ENABLE", "P2P_DIRECT_DISABLE", "P2P_LL_THRESHOLD", "P2P_NET_CHUNKSIZE",
    "P2P_NVL_CHUNKSIZE", "P2P_PCI_CHUNKSIZE", "P2P_PXN_LEVEL", "P2P_READ_ENABLE", "P2P_SCHEDULE_GROUP_SIZE",
    "P2P_USE_CUDA_MEMCPY", "PAT_ENABLE", "PROGRESS_APPENDOP_FREQ", "PROXY_APPEND_BATCH_SIZE", "PROXY_DUMP_SIGNAL",
    "PXN_C2C", "PXN_DISABLE", "RAS_ENABLE", "RAS_TIMEOUT_FACTOR", "REPORT_CONNECT_PROGRESS", "RUNTIME_CONNECT",
    "SET_CPU_STACK_SIZE", "SET_STACK_SIZE", "SET_THREAD_NAME", "SHM_DISABLE", "SHM_LOCALITY", "SHM_MEMCPY_MODE",
    "SHM_USE_CUDA_MEMCPY", "SINGLE_PROC_MEM_REG_ENABLE", "SOCKET_INLINE", "SOCKET_MIN_TASKSIZE", "SOCKET_NTHREADS",
    "SOCKET_RCVBUF", "SOCKET_RETRY_CNT", "SOCKET_RETRY_SLEEP_MSEC", "SOCKET_SNDBUF", "SYM_CTAS", "TOPO_DUMP_FILE_RANK",
    "UID_STAGGER_RATE", "UID_STAGGER_THRESHOLD", "UNPACK_DOUBLE_NCHANNELS", "WIN_ENABLE", "WIN_STRIDE",
    "WORK_ARGS_BYTES", "WORK_FIFO_BYTES",
    // 2.28.9 strings and logging
    "ALGO", "PROTO", "COMM_ID", "CONF_FILE", "ENV_PLUGIN", "GRAPH_DUMP_FILE", "GRAPH_FILE", "HOSTID", "IB_ADDR_FAMILY",
    "IB_ADDR_RANGE", "IB_HCA", "LAUNCH_MODE", "NET", "NETDEVS_POLICY", "NET_FORCE_MERGE", "NET_MERGE_LEVEL",
    "NET_PLUGIN", "OOB_NET_IFNAME", "PROFILER_PLUGIN", "PROXY_CPUSET", "RAS_ADDR", "SOCKET_FAMILY", "SOCKET_IFNAME",
    "SYM_KERNEL", "THREAD_THRESHOLDS", "TOPO_DUMP_FILE", "TOPO_FILE", "TUNER_PLUGIN", "DEBUG", "DEBUG_SUBSYS",
    "DEBUG_FILE", "DEBUG_TIMESTAMP_FORMAT", "DEBUG_TIMESTAMP_LEVELS", "WARN_ENABLE_DEBUG_INFO", "P2P_DISABLE",
    "P2P_LEVEL", "NET_GDR_LEVEL", "PROFILE_EVENT_MASK",
    // 2.29 / 2.30
    "GIN_PLUGIN", "GIN_PLUGIN_REF_COUNT", "RMA_PLUGIN", "RMA_PLUGIN_REF_COUNT", "NUM_RMA_CTX", "P2P_MAX_PEERS",
    "GRAPH_STREAM_ORDERING", "DISABLE_MEM_MANAGER", "ENABLE_VERSION_CHECK", "PARAM_DUMP_ALL", "ALLGATHERV_ENABLE",
    "RMA_DISABLE", "MULTI_SEGMENT_REGISTER", "ELASTIC_BUFFER_REGISTER", "CHECK_MODE", "DEV_API_JIT",
    "GDAKI_USE_RELIABLE_DB", "GIN_GDAKI_MAX_DEST_RD_ATOMIC", "GIN_GDAKI_MAX_QP_RD_ATOMIC", "GIN_IB_TC",
    "GIN_NCONNECTIONS", "IBVERBS_LIB", "IB_DEVICE_PCI_ORDER", "IB_OOO_RQ", "IB_PREPOST_RECEIVE_WORK_REQUESTS",
    "IB_QUERY_PORT_SPEED", "IB_RECEIVER_SIDE_MATCHING_SCHEME", "IB_RESILIENCY_PORT_FAILOVER",
    "IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS", "IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY",
    "IB_RESILIENCY_PORT_RECOVERY", "IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
    "IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL", "IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
    "IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE", "IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
    "IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", "IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "IB_SUBNET_AWARE_ROUTING",
    "IB_SUBNET_PREFIX_LEN", "IGNORE_COLLNET_MISMATCH", "IGNORE_NET_MISMATCH", "IPC_USE_ABSTRACT_SOCKET",
    "LSA_TEAM_SIZE", "MLOPART_RDMA_ENABLE", "MNNVL_CROSS_CLIQUE", "MULTI_RANK_GPU_ENABLE", "NET_GDR_MLOPART",
    "NET_MERGE_POLICY", "NO_CACHE", "P2P_EPOCH_ENABLE", "P2P_PER_CHANNEL_NET_BW", "RMA_PROXY_DUMP_SIGNAL",
    "RMA_PROXY_QUEUE_SIZE", "SHADOW_MEMPOOL_MAX_SIZE", "SOCKET_MAGIC", "SOCKET_POLL_TIMEOUT_MSEC",
    "SYM_CE_THRESHOLD", "SYM_GIN_KERNELS_ENABLE", "SYM_NOWIN_ENABLE", "SYM_REUSE_SYSMEM_HANDLES",
    "SYM_RS_GIN_CHUNK_SIZE", "SYM_TMA_ENABLE", "TOPO_SPLIT_MLOPART",
};

// Variables honoured without a knob object (read by the logger and the config-file loader).
struct Special {
  const char* name;
  const char* effect;
};
const Special kSpecial[] = {
    {"DEBUG", "Log level: VERSION, WARN, INFO, ABORT, TRACE, as NCCL's (docs/observability.md)"},
    {"DEBUG_SUBSYS", "Subsystems logged, NCCL's syntax (INIT,COLL,...; ^ inverts), plus Theseus' SCHEDULE, POLICY, "
                     "EPOCH, ATTRS, EXEC"},
    {"DEBUG_FILE", "Log file, %h host and %p pid expanded, as NCCL's"},
    {"CONF_FILE", "Config file of NAME=VALUE lines read before ~/.nccl.conf and /etc/nccl.conf, as NCCL's"},
    {"ENABLE_VERSION_CHECK", "0 lets ncclCommQueryProperties accept a properties struct of another version"},
};

// Why a variable has no effect, by name prefix (first match), then the default.
struct Reason {
  const char* prefix;
  const char* why;
};
const Reason kReasons[] = {
    {"IB_", "not implemented by Theseus' IB network (docs/networks.md lists what it honours)"},
    {"GIN_", "the device-initiated networking API (GIN) is not implemented"},
    {"GDAKI_", "the device-initiated networking API (GIN) is not implemented"},
    {"RMA_", "one-sided RMA operations are refused (no copy-engine or proxy path)"},
    {"NUM_RMA_CTX", "one-sided RMA operations are refused"},
    {"SYM_", "symmetric-memory kernels are not implemented"},
    {"LSA_", "the device API is not implemented"},
    {"DEV_API", "the device API is not implemented"},
    {"NVLS", "no NVLink SHARP (NVLS) support"},
    {"MNNVL", "no multi-node NVLink support"},
    {"NVB", "no GPU peer-to-peer transport yet"},
    {"P2P_", "no GPU peer-to-peer transport yet; sends and receives go through Theseus' transports"},
    {"PXN", "no PXN (proxying through another GPU's NIC)"},
    {"COLLNET", "no CollNet (in-network reduction)"},
    {"GDR", "no GDRCopy: the host never maps GPU memory (GPUDirect RDMA serves the proxied device FIFOs: "
            "NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ)"},
    {"NET_GDR", "GPUDirect RDMA serves the proxied device FIFOs the network accepts within NCCL_NET_GDR_LEVEL "
                "(NCCL_NET_GDR_READ=0 stages sends); no C2C or partitioning controls"},
    {"CUMEM_HOST", "host memory is the caller's or shared segments; Theseus allocates no cuMem host memory"},

    {"NET_", "the net-plugin backend uses one plugin device per rank: no NIC merging, shared comms or buffers, "
             "or overhead tuning"},
    {"NETDEVS_POLICY", "no NIC selection beyond NCCL_SOCKET_IFNAME yet"},
    {"OOB_NET", "the bootstrap always runs over TCP"},
    {"PROXY_", "Theseus has no proxy thread"},
    {"PROGRESS_APPENDOP", "Theseus has no proxy thread"},
    {"RAS_", "no RAS subsystem"},
    {"TOPO_", "NCCL's own topology XML format is not read: Theseus reads the host topology with hwloc, or an hwloc "
              "XML from THESEUS_TOPO_FILE"},
    {"GRAPH_", "no NCCL graph search: schedules come from policies"},
    {"LL", "Theseus runs one protocol; NCCL's LL/LL128 buffers do not exist"},
    {"NTHREADS", "no NCCL kernels: CUDA thread counts do not apply"},
    {"CTA", "no NCCL kernels: CTA settings do not apply"},
    {"MIN_N", "channel counts come from schedule parameters (policies, THESEUS_SCHEDULE)"},
    {"MAX_N", "channel counts come from schedule parameters (policies, THESEUS_SCHEDULE)"},
    {"MAX_P2P", "channel counts come from schedule parameters"},
    {"MIN_P2P", "channel counts come from schedule parameters"},
    {"CHUNK_SIZE", "slice sizes come from THESEUS_SLICE_BYTES and policies"},
    {"WORK_", "no NCCL kernels: work FIFO sizes do not apply"},
    {"L1_", "no NCCL kernels"},
    {"LAUNCH_", "no NCCL kernel launches"},
    {"MEM_SYNC", "no NCCL kernel launches"},
    {"UNPACK", "no NCCL kernels"},
    {"PAT_ENABLE", "PAT is chosen through NCCL_ALGO or a tuner (it maps to recursive/halving doubling)"},
    {"ALLGATHERV", "no AllGatherV path"},
    {"WIN_", "windows are recorded; no symmetric-memory kernels use them"},
    {"LOCAL_REGISTER", "registrations are recorded, not used for zero-copy yet (docs/nccl-compatibility.md)"},
    {"MULTI_SEGMENT_REGISTER", "registrations are recorded, not used for zero-copy yet"},
    {"ELASTIC_BUFFER", "registrations are recorded, not used for zero-copy yet"},
    {"LEGACY_CUDA_REGISTER", "registrations are recorded, not used for zero-copy yet"},
    {"SINGLE_PROC_MEM_REG", "registrations are recorded, not used for zero-copy yet"},
    {"SHADOW_MEMPOOL", "no shadow memory pool"},
    {"ENV_PLUGIN", "environment plugins are not loaded: variables come from the environment and config files"},
    {"SOCKET_", "not used by Theseus' socket transport (its own THESEUS_SOCKET_* knobs tune it)"},
    {"IPC_", "no CUDA IPC transport yet"},
    {"SET_", "Theseus sets no thread names or stack sizes"},
    {"GROUP_CUDA_STREAM", "no NCCL kernels"},
    {"IGNORE_", "no topology or network checks of this kind"},
    {"CROSS_NIC", "no multi-NIC rings yet"},
    {"SHM_", "not used by Theseus' shared-memory transport (THESEUS_SHM_* knobs tune it)"},
    {"UID_STAGGER", "the bootstrap root takes joins as they come"},
    {"CONNECT_ROUND", "connections are made lazily per peer"},
    {"RUNTIME_CONNECT", "connections are made lazily per peer"},
    {"REPORT_CONNECT", "connections are made lazily per peer"},
    {"NVTX", "Theseus emits no NVTX ranges"},
    {"CREATE_THREAD_CONTEXT", "gone from NCCL since 2.29"},
    {"MULTI_RANK_GPU", "each rank is its own communicator member; no GPU sharing checks"},
    {"NO_CACHE", "no NCCL caches"},
    {"PARAM_DUMP_ALL", "use ncclParamDumpAll() or theseus-config --list"},
    {"THREAD_THRESHOLDS", "no NCCL kernels"},
    {"MLOPART", "no topology splitting"},
    {"TOPO_SPLIT", "no topology splitting"},
};

const char* reasonFor(const std::string& bare) {
  for (const Reason& r : kReasons)
    if (bare.rfind(r.prefix, 0) == 0) return r.why;
  return "not used by Theseus";
}

bool ignoredEcosystemName(const std::string& name) {
  static const char* const exact[] = {"NCCL_VERSION", "NCCL_HOME", "NCCL_INCLUDE_DIR", "NCCL_LIB_DIR",
                                      "NCCL_LIBRARY", "NCCL_INCLUDE", "NCCL_DIR"};
  for (const char* e : exact)
    if (name == e) return true;
  // Theseus' tools: the launcher's rank variables, the test harness, make test-torch, gpu-check, the
  // libibverbs and CUDA test doubles (tests/ib_double, tests/cuda_double).
  static const char* const tools[] = {"THESEUS_RANK", "THESEUS_NRANKS", "THESEUS_LOCAL_RANK", "THESEUS_LOCAL_SIZE",
                                      "THESEUS_HOST", "THESEUS_EXPECT_LIB"};
  for (const char* t : tools)
    if (name == t) return true;
  for (const char* prefix : {"NCCL_ROOT", "NCCL_TESTS_", "THESEUS_TEST_", "THESEUS_TORCH_", "THESEUS_GPU_",
                             "THESEUS_FAKE_IBV_", "THESEUS_FAKE_CUDA_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::set<std::string> knownNames() {
  std::set<std::string> names;
  for (const char* n : kNvidiaNames) names.insert(std::string("NCCL_") + n);
  for (const KnobInfo* k : allKnobs()) names.insert(k->name);
  return names;
}

}  // namespace

std::vector<NcclVariable> ncclVariables() {
  std::set<std::string> seen;
  std::vector<NcclVariable> out;
  auto add = [&](const std::string& name) {
    if (!seen.insert(name).second) return;
    NcclVariable v;
    v.name = name;
    const std::string bare = name.substr(5);
    if (const KnobInfo* k = findKnob(name.c_str())) {
      v.honoured = true;
      v.effect = k->help;
    } else {
      for (const Special& s : kSpecial)
        if (bare == s.name) {
          v.honoured = true;
          v.effect = s.effect;
        }
      if (!v.honoured) v.effect = reasonFor(bare);
    }
    out.push_back(std::move(v));
  };
  for (const char* n : kNvidiaNames) add(std::string("NCCL_") + n);
  for (const KnobInfo* k : allKnobs())
    if (strncmp(k->name, "NCCL_", 5) == 0) add(k->name);
  std::sort(out.begin(), out.end(), [](const NcclVariable& a, const NcclVariable& b) { return a.name < b.name; });
  return out;
}

std::string closestKnownName(const std::string& name) {
  std::string best;
  size_t bestDistance = SIZE_MAX;
  for (const std::string& known : knownNames()) {
    size_t d = editDistance(name, known);
    if (d < bestDistance) {
      bestDistance = d;
      best = known;
    }
  }
  return bestDistance <= std::max<size_t>(2, name.size() / 5) ? best : std::string();
}

void reportEnvironment() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  std::vector<NcclVariable> nccl = ncclVariables();
  std::set<std::string> known = knownNames();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, eq - *e);
    const bool isNccl = name.rfind("NCCL_", 0) == 0, isOurs = name.rfind("THESEUS_", 0) == 0;
    if ((!isNccl && !isOurs) || ignoredEcosystemName(name)) continue;
    if (known.count(name) == 0) {
      std::string close = closestKnownName(name);
      if (!close.empty())
        TH_WARN("%s is not a variable %s knows; did you mean %s?", name.c_str(), isNccl ? "NCCL or Theseus" : "Theseus",
                close.c_str());
      else
        TH_WARN("%s is not a variable %s knows; it is ignored (theseus-config --list shows them all)", name.c_str(),
                isNccl ? "NCCL or Theseus" : "Theseus");
      continue;
    }
    auto it = std::find_if(nccl.begin(), nccl.end(), [&](const NcclVariable& v) { return v.name == name; });
    if (it != nccl.end() && !it->honoured)
      TH_INFO(log::kInit | log::kEnv, "%s has no effect in Theseus: %s", name.c_str(), it->effect.c_str());
  }
}

}  // namespace theseus
