// The exported libibverbs entry points of the test double, except the QP ones
// (fake_ibv_qp.cc): devices, contexts, protection domains, memory regions,
// completion queues and channels, asynchronous events and the string helpers.
// Each entry point is a short body inside guard(), which turns an escaping
// exception (allocation failure) into the errno-style failure verbs callers expect.
#include <endian.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fake_ibv_api.h"
#include "fake_ibv_internal.h"

// verbs.h defines these names as macros over inline wrappers; the double defines the functions.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace theseus::fakeibv {
namespace {

constexpr uint32_t kMaxCqe = 65536;
constexpr int kCompVectors = 8;

void makeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') mkdir(path.substr(0, pos).c_str(), 0777);
  }
}

void copyName(char* dst, size_t cap, const std::string& src) {
  if (src.size() >= cap) warn("name '%s' truncated to %zu bytes", src.c_str(), cap - 1);
  snprintf(dst, cap, "%s", src.c_str());
}

FakeDevice* makeDevice(const State& s, const DeviceConfig& cfg, int index) {
  auto* d = new FakeDevice();
  memset(&d->dev, 0, sizeof(d->dev));
  d->cfg = cfg;
  d->guid = nodeGuid(s.cfg.host, cfg.name);
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;
  copyName(d->dev.name, sizeof(d->dev.name), cfg.name);
  copyName(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs" + std::to_string(index));
  const std::string sys = s.cfg.dir + "/sys/" + s.cfg.host;
  copyName(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), sys + "/" + cfg.name);
  copyName(d->dev.dev_path, sizeof(d->dev.dev_path), sys + "/uverbs" + std::to_string(index));
  makeDirs(d->dev.ibdev_path);
  d->portUp.assign(cfg.ports + 1, 1);
  for (int p = 1; p <= cfg.ports; ++p) d->portUp[p] = access(downFilePath(s, d, p).c_str(), F_OK) != 0;
  d->pacedMbps.assign(cfg.ports + 1, 0);
  d->busyUntil.assign(cfg.ports + 1, Clock::time_point{});
  for (int p = 1; p <= cfg.ports; ++p) d->pacedMbps[p] = degradedRateMbps(s, d, p);
  return d;
}

// Whether every page of [addr, addr + len) is mapped readable (and writable when write), as the
// kernel's pinning of a registration requires: /proc/self/maps, walked in address order.
bool rangeAccessible(const void* addr, size_t len, bool write) {
  uintptr_t cursor = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = cursor + len;
  if (end < cursor) return false;
  FILE* maps = fopen("/proc/self/maps", "re");
  if (maps == nullptr) return true;  // cannot tell: let it through
  char line[512];
  bool ok = false;
  while (!ok && fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long long lo = 0, hi = 0;
    char perms[8] = {};
    if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3) continue;
    if (hi <= cursor) continue;
    if (lo > cursor || perms[0] != 'r' || (write && perms[1] != 'w')) break;  // a hole or no access
    cursor = static_cast<uintptr_t>(hi);
    ok = cursor >= end;
  }
  fclose(maps);
  return ok;
}

ibv_mr* regMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.cfg.faults.regMrFail) {
    errno = ENOMEM;
    return nullptr;
  }
  const unsigned needsLocalWrite = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if (pd == nullptr || length == 0 || ((access & needsLocalWrite) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    errno = EINVAL;
    return nullptr;
  }
  const unsigned writable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if (addr == nullptr || !rangeAccessible(addr, length, (access & writable) != 0)) {
    errno = EFAULT;
    return nullptr;
  }
  auto* fpd = reinterpret_cast<FakePd*>(pd);
  auto* mr = new FakeMr();
  uint32_t key = s.nextKey++;
  if (key == kBadRkey) key = s.nextKey++;
  mr->mr = ibv_mr{pd->context, pd, addr, length, key, key, key};
  mr->pd = fpd;
  mr->access = access;
  mr->iova = iova;
  s.mrs[key] = mr;
  ++fpd->users;
  return &mr->mr;
}

int pollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* c = reinterpret_cast<FakeCq*>(cq);
  if (c->overrun) return -1;
  int got = 0;
  while (got < n && !c->entries.empty()) {
    wc[got++] = c->entries.front();
    c->entries.pop_front();
  }
  return got;
}

int reqNotifyCq(ibv_cq* cq, int solicitedOnly) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  reinterpret_cast<FakeCq*>(cq)->armed = true;
  return 0;
}

void writeEvent(int fd) {
  const uint64_t one = 1;
  if (write(fd, &one, sizeof(one)) != sizeof(one)) warn("eventfd write failed: %s", strerror(errno));
}

}  // namespace

State& state() {
  static State* s = [] {
    auto* st = new State();
    st->cfg = readConfig();
    makeDirs(st->cfg.dir);
    st->wakeFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->wakeFd < 0) fatal("eventfd for the wire thread");
    for (size_t i = 0; i < st->cfg.devices.size(); ++i)
      st->devices.push_back(makeDevice(*st, st->cfg.devices[i], static_cast<int>(i)));
    return st;
  }();
  return *s;
}

void queueAsyncEvent(FakeContext* ctx, const ibv_async_event& ev) {
  if (ctx->closed) return;
  ctx->events.push_back(ev);
  writeEvent(ctx->ctx.async_fd);
}

void notifyCq(FakeCq* cq) {
  if (!cq->armed || cq->channel == nullptr) return;
  cq->armed = false;
  cq->channel->events.push_back(cq);
  writeEvent(cq->channel->ch.fd);
}

bool portIsUp(const State& s, const FakeDevice* dev, int port) {
  return port >= 1 && port <= dev->cfg.ports && dev->portUp[port] != 0;
}

std::string downFilePath(const State& s, const FakeDevice* dev, int port) {
  return s.cfg.dir + "/down-" + s.cfg.host + "-" + dev->cfg.name + "-" + std::to_string(port);
}

std::string rateFilePath(const State& s, const FakeDevice* dev, int port) {
  return s.cfg.dir + "/rate-" + s.cfg.host + "-" + dev->cfg.name + "-" + std::to_string(port);
}

int degradedRateMbps(const State& s, const FakeDevice* dev, int port) {
  FILE* f = fopen(rateFilePath(s, dev, port).c_str(), "r");
  if (f == nullptr) return 0;
  int mbps = 0;
  if (fscanf(f, "%d", &mbps) != 1 || mbps < 1 || mbps > 10000000) mbps = 0;
  fclose(f);
  return mbps;
}

}  // namespace theseus::fakeibv

using namespace theseus::fakeibv;

FAKE_IBV_EXPORT ibv_device** ibv_get_device_list(int* num) {
  return guard<ibv_device**>(nullptr, [&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto** list = new ibv_device*[s.devices.size() + 1];
    for (size_t i = 0; i < s.devices.size(); ++i) list[i] = &s.devices[i]->dev;
    list[s.devices.size()] = nullptr;
    if (num != nullptr) *num = static_cast<int>(s.devices.size());
    return list;
  });
}

FAKE_IBV_EXPORT void ibv_free_device_list(ibv_device** list) { delete[] list; }

FAKE_IBV_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device->name; }

FAKE_IBV_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  return htobe64(reinterpret_cast<FakeDevice*>(device)->guid);
}

FAKE_IBV_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  return guard<ibv_context*>(nullptr, [&]() -> ibv_context* {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto* c = new FakeContext();
    memset(&c->ctx, 0, sizeof(c->ctx));
    c->dev = reinterpret_cast<FakeDevice*>(device);
    c->ctx.device = device;
    c->ctx.ops._compat_query_port = ibv_query_port;
    c->ctx.ops.poll_cq = pollCq;
    c->ctx.ops.req_notify_cq = reqNotifyCq;
    c->ctx.ops.post_send = postSend;
    c->ctx.ops.post_recv = postRecv;
    c->ctx.cmd_fd = -1;
    c->ctx.async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    c->ctx.num_comp_vectors = kCompVectors;
    pthread_mutex_init(&c->ctx.mutex, nullptr);
    c->ctx.abi_compat = nullptr;  // not __VERBS_ABI_IS_EXTENDED: the inline wrappers take the plain paths
    if (c->ctx.async_fd < 0) {
      delete c;
      return nullptr;
    }
    s.contexts.push_back(c);
    startWireLocked(s);
    return &c->ctx;
  });
}

FAKE_IBV_EXPORT int ibv_close_device(ibv_context* context) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* c = reinterpret_cast<FakeContext*>(context);
  if (c->closed) return 0;
  c->closed = true;
  close(c->ctx.async_fd);
  c->events.clear();
  // A context whose objects were not destroyed stays allocated (they point at it).
  if (c->resources == 0) {
    s.contexts.erase(std::find(s.contexts.begin(), s.contexts.end(), c));
    pthread_mutex_destroy(&c->ctx.mutex);
    delete c;
  }
  return 0;
}

FAKE_IBV_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  const FakeDevice* d = reinterpret_cast<FakeContext*>(context)->dev;
  memset(attr, 0, sizeof(*attr));
  snprintf(attr->fw_ver, sizeof(attr->fw_ver), "1.0.0 (theseus fake)");
  attr->node_guid = htobe64(d->guid);
  attr->sys_image_guid = htobe64(d->guid);
  attr->max_mr_size = 1ULL << 40;
  attr->page_size_cap = 0xfffff000;
  attr->vendor_id = 0x02c9;
  attr->vendor_part_id = 4123;
  attr->hw_ver = 1;
  attr->max_qp = 4096;
  attr->max_qp_wr = kMaxQpWr;
  attr->device_cap_flags = IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_RC_RNR_NAK_GEN;
  attr->max_sge = kMaxSge;
  attr->max_sge_rd = kMaxSge;
  attr->max_cq = 65536;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 20;
  attr->max_qp_rd_atom = kMaxRdAtomic;
  attr->max_res_rd_atom = kMaxRdAtomic * 4096;
  attr->max_qp_init_rd_atom = kMaxRdAtomic;
  attr->atomic_cap = IBV_ATOMIC_NONE;
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = static_cast<uint8_t>(d->cfg.ports);
  return 0;
}

FAKE_IBV_EXPORT int ibv_query_port(ibv_context* context, uint8_t port, _compat_ibv_port_attr* out) {
  State& s = state();
  const FakeDevice* d = reinterpret_cast<FakeContext*>(context)->dev;
  if (port < 1 || port > d->cfg.ports || out == nullptr) return EINVAL;
  // The header's inline wrapper passes a full struct ibv_port_attr.
  auto* attr = reinterpret_cast<ibv_port_attr*>(out);
  memset(attr, 0, sizeof(*attr));
  const bool up = access(downFilePath(s, d, port).c_str(), F_OK) != 0;
  attr->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->phys_state = up ? 5 : 3;  // LinkUp / Disabled
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = d->cfg.mtu;
  attr->gid_tbl_len = gidTableLen(d->cfg.roce);
  attr->max_msg_sz = kMaxMsgSize;
  attr->pkey_tbl_len = 1;
  attr->lid = d->cfg.roce ? 0 : portLid(s.cfg.host, d->cfg.name, port);
  attr->sm_lid = d->cfg.roce ? 0 : 1;
  attr->max_vl_num = 4;
  attr->subnet_timeout = 18;
  const int degraded = degradedRateMbps(s, d, port);
  speedToIb(degraded > 0 ? degraded : d->cfg.speedMbps, &attr->active_speed, &attr->active_width);
  attr->link_layer = d->cfg.roce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  if (!d->cfg.roce) attr->port_cap_flags = IBV_PORT_CM_SUP;
  return 0;
}

FAKE_IBV_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                                      uint32_t flags, size_t entrySize) {
  State& s = state();
  const FakeDevice* d = reinterpret_cast<FakeContext*>(context)->dev;
  if (entry == nullptr || flags != 0 || entrySize < sizeof(*entry) || port < 1 ||
      port > static_cast<uint32_t>(d->cfg.ports))
    return EINVAL;
  ibv_gid_type type = IBV_GID_TYPE_IB;
  memset(entry, 0, sizeof(*entry));
  if (!portGid(s.cfg.host, d->cfg, static_cast<int>(port), static_cast<int>(index), &entry->gid, &type))
    return EINVAL;
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = type;
  return 0;
}

FAKE_IBV_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t maxEntries,
                                             uint32_t flags, size_t entrySize) {
  const FakeDevice* d = reinterpret_cast<FakeContext*>(context)->dev;
  if (flags != 0 || entrySize < sizeof(ibv_gid_entry)) return -EINVAL;
  size_t n = 0;
  for (int p = 1; p <= d->cfg.ports; ++p) {
    for (int i = 0; i < gidTableLen(d->cfg.roce); ++i) {
      if (n == maxEntries) return -EINVAL;
      auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + n * entrySize);
      if (_ibv_query_gid_ex(context, p, i, e, 0, entrySize) != 0) return -EINVAL;
      ++n;
    }
  }
  return static_cast<ssize_t>(n);
}

FAKE_IBV_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) {
  ibv_gid_entry entry;
  if (index < 0 || _ibv_query_gid_ex(context, port, static_cast<uint32_t>(index), &entry, 0, sizeof(entry)) != 0) {
    errno = EINVAL;
    return -1;
  }
  *gid = entry.gid;
  return 0;
}

FAKE_IBV_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port, int index, __be16* pkey) {
  const FakeDevice* d = reinterpret_cast<FakeContext*>(context)->dev;
  if (port < 1 || port > d->cfg.ports || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

FAKE_IBV_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  return guard<ibv_pd*>(nullptr, [&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto* pd = new FakePd();
    pd->ctx = reinterpret_cast<FakeContext*>(context);
    pd->pd = ibv_pd{context, static_cast<uint32_t>(s.nextId++)};
    ++pd->ctx->resources;
    return &pd->pd;
  });
}

FAKE_IBV_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* p = reinterpret_cast<FakePd*>(pd);
  if (p->users > 0) return EBUSY;
  --p->ctx->resources;
  delete p;
  return 0;
}

FAKE_IBV_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return guard<ibv_mr*>(nullptr,
                        [&] { return regMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access); });
}

FAKE_IBV_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return guard<ibv_mr*>(nullptr, [&] { return regMr(pd, addr, length, iova, access); });
}

FAKE_IBV_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  return guard<ibv_mr*>(nullptr, [&] { return regMr(pd, addr, length, iova, access); });
}

// A dma-buf registration (GPUDirect RDMA): the NIC reaches memory through the
// descriptor, from `offset` past the descriptor's start. The double maps the
// descriptor there and registers that mapping under `iova` (the device address
// the caller's work requests use), so bytes move through the descriptor's pages
// and never through the caller's own address: a wrong descriptor or offset moves
// wrong bytes, as on a NIC. The start is the descriptor's file position, which
// the CUDA double's cuMemGetHandleForAddressRange sets to the exported range
// (a real dma-buf starts at the range). Faults: no_dmabuf (the provider has no
// dma-buf support: EOPNOTSUPP, what rdma-core answers then, probes included),
// dmabuf_fail (a descriptor's registration fails with EFAULT).
FAKE_IBV_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                          int access) {
  return guard<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    FaultConfig faults;
    {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.mu);
      faults = s.cfg.faults;
    }
    if (faults.noDmaBuf) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      errno = EBADF;
      return nullptr;
    }
    if (faults.dmaBufFail) {
      errno = EFAULT;
      return nullptr;
    }
    const off_t start = lseek(fd, 0, SEEK_CUR);
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (pd == nullptr || length == 0 || start < 0 ||
        static_cast<uint64_t>(start) + offset + length > static_cast<uint64_t>(st.st_size)) {
      errno = EINVAL;
      return nullptr;
    }
    const uint64_t at = static_cast<uint64_t>(start) + offset;
    const uint64_t skew = at % page;
    const size_t mapBytes = (skew + length + page - 1) / page * page;
    void* map = mmap(nullptr, mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(at - skew));
    if (map == MAP_FAILED) return nullptr;  // errno from mmap
    ibv_mr* mr = regMr(pd, static_cast<char*>(map) + skew, length, iova, static_cast<unsigned>(access));
    if (mr == nullptr) {
      const int e = errno;
      munmap(map, mapBytes);
      errno = e;
      return nullptr;
    }
    auto* m = reinterpret_cast<FakeMr*>(mr);
    m->dmaBufMap = map;
    m->dmaBufMapBytes = mapBytes;
    return mr;
  });
}

FAKE_IBV_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* m = reinterpret_cast<FakeMr*>(mr);
  s.mrs.erase(m->mr.rkey);
  --m->pd->users;
  if (m->dmaBufMap != nullptr) munmap(m->dmaBufMap, m->dmaBufMapBytes);
  delete m;
  return 0;
}

FAKE_IBV_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return guard<ibv_comp_channel*>(nullptr, [&]() -> ibv_comp_channel* {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return nullptr;
    auto* ch = new FakeChannel();
    ch->ch = ibv_comp_channel{context, fd, 0};
    ++reinterpret_cast<FakeContext*>(context)->resources;
    return &ch->ch;
  });
}

FAKE_IBV_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* ch = reinterpret_cast<FakeChannel*>(channel);
  if (ch->cqs > 0) return EBUSY;
  close(ch->ch.fd);
  --reinterpret_cast<FakeContext*>(ch->ch.context)->resources;
  delete ch;
  return 0;
}

FAKE_IBV_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                                      int compVector) {
  return guard<ibv_cq*>(nullptr, [&]() -> ibv_cq* {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe || compVector < 0 || compVector >= kCompVectors) {
      errno = EINVAL;
      return nullptr;
    }
    auto* cq = new FakeCq();
    memset(&cq->cq, 0, sizeof(cq->cq));
    cq->ctx = reinterpret_cast<FakeContext*>(context);
    cq->channel = reinterpret_cast<FakeChannel*>(channel);
    cq->capacity = static_cast<size_t>(cqe);
    cq->cq.context = context;
    cq->cq.channel = channel;
    cq->cq.cq_context = cqContext;
    cq->cq.handle = static_cast<uint32_t>(s.nextId++);
    cq->cq.cqe = cqe;
    pthread_mutex_init(&cq->cq.mutex, nullptr);
    pthread_cond_init(&cq->cq.cond, nullptr);
    if (cq->channel != nullptr) ++cq->channel->cqs;
    ++cq->ctx->resources;
    return &cq->cq;
  });
}

FAKE_IBV_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* c = reinterpret_cast<FakeCq*>(cq);
  if (c->qps > 0) return EBUSY;
  if (c->channel != nullptr) {
    auto& ev = c->channel->events;
    ev.erase(std::remove(ev.begin(), ev.end(), c), ev.end());
    --c->channel->cqs;
  }
  --c->ctx->resources;
  pthread_mutex_destroy(&c->cq.mutex);
  pthread_cond_destroy(&c->cq.cond);
  delete c;
  return 0;
}

FAKE_IBV_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext) {
  State& s = state();
  auto* ch = reinterpret_cast<FakeChannel*>(channel);
  for (;;) {
    uint64_t count = 0;
    if (read(ch->ch.fd, &count, sizeof(count)) != sizeof(count)) return -1;  // EAGAIN when non-blocking
    std::lock_guard<std::mutex> lock(s.mu);
    if (ch->events.empty()) continue;  // the event of a CQ destroyed since
    FakeCq* c = ch->events.front();
    ch->events.pop_front();
    *cq = &c->cq;
    *cqContext = c->cq.cq_context;
    return 0;
  }
}

FAKE_IBV_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int n) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cq->comp_events_completed += n;
}

FAKE_IBV_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  State& s = state();
  auto* c = reinterpret_cast<FakeContext*>(context);
  for (;;) {
    uint64_t count = 0;
    if (read(c->ctx.async_fd, &count, sizeof(count)) != sizeof(count)) return -1;  // EAGAIN when non-blocking
    std::lock_guard<std::mutex> lock(s.mu);
    if (c->events.empty()) continue;
    *event = c->events.front();
    c->events.pop_front();
    return 0;
  }
}

FAKE_IBV_EXPORT void ibv_ack_async_event(ibv_async_event* event) {}

FAKE_IBV_EXPORT int ibv_fork_init(void) { return 0; }

FAKE_IBV_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error",
      "TM error", "TM rendezvous error"};
  const auto i = static_cast<size_t>(status);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

FAKE_IBV_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active",
      "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
      "last WQE reached", "client reregistration", "GID table change", "WQ fatal"};
  const auto i = static_cast<size_t>(event);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

FAKE_IBV_EXPORT const char* ibv_node_type_str(ibv_node_type type) {
  switch (type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    default: return "unknown";
  }
}

FAKE_IBV_EXPORT const char* ibv_port_state_str(ibv_port_state state) {
  static const char* const kNames[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                       "active deferred"};
  const auto i = static_cast<size_t>(state);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}
