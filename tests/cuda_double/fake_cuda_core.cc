#include "fake_cuda_core.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

namespace fakecuda {

// ---- memory ----

namespace {
std::mutex& memoryMutex() {
  static auto* mu = new std::mutex();  // never destroyed: calls may come during exit
  return *mu;
}
std::map<uintptr_t, Allocation>& allocations() {  // by base address
  static auto* m = new std::map<uintptr_t, Allocation>();
  return *m;
}
}  // namespace

bool findAllocation(const void* p, Allocation* out) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(memoryMutex());
  auto& m = allocations();
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return false;
  --it;
  if (addr >= it->second.base + it->second.bytes) return false;
  if (out != nullptr) *out = it->second;
  return true;
}

// Device memory is a shared mapping of a memfd of its own, so that an IPC
// handle can name it to another process; pinned host memory is plain memory.
void* allocate(size_t bytes, Kind kind, int device) {
  bytes = bytes == 0 ? 1 : bytes;
  void* p = nullptr;
  int fd = -1;
  if (kind == Kind::kDevice) {
    fd = memfd_create("fake-cuda-device", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        (p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
  } else if (posix_memalign(&p, 256, bytes) != 0) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(memoryMutex());
  allocations()[reinterpret_cast<uintptr_t>(p)] = Allocation{reinterpret_cast<uintptr_t>(p), bytes, kind, device,
                                                             true, fd, false};
  return p;
}

cudaError_t release(void* p, Kind kind) {
  if (p == nullptr) return cudaSuccess;
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(memoryMutex());
    auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations().end() || !it->second.owned || it->second.kind != kind) return cudaErrorInvalidValue;
    a = it->second;
    allocations().erase(it);
  }
  if (a.fd >= 0) {
    munmap(p, a.bytes);
    close(a.fd);
  } else {
    free(p);
  }
  return cudaSuccess;
}

namespace {
struct IpcHandle {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t bytes;
  unsigned char unused[40];
};
static_assert(sizeof(IpcHandle) == 64);
constexpr uint64_t kIpcMagic = 0x4350494b41464355ull;
}  // namespace

bool ipcExport(const void* p, unsigned char handle[64]) {
  Allocation a;
  // VMM memory is not legacy-IPC capable: cuIpcGetMemHandle refuses it, as the driver does.
  if (!findAllocation(p, &a) || a.base != reinterpret_cast<uintptr_t>(p) || a.fd < 0 || a.imported || a.vmm)
    return false;
  IpcHandle h{kIpcMagic, getpid(), a.fd, a.bytes, {}};
  memcpy(handle, &h, sizeof(h));
  return true;
}

void* ipcOpen(const unsigned char handle[64], int device) {
  IpcHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kIpcMagic || h.pid == getpid() || h.bytes == 0) return nullptr;
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the pages
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(memoryMutex());
  allocations()[reinterpret_cast<uintptr_t>(p)] =
      Allocation{reinterpret_cast<uintptr_t>(p), h.bytes, Kind::kDevice, device, false, -1, true};
  return p;
}

bool ipcClose(void* p) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(memoryMutex());
    auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations().end() || !it->second.imported) return false;
    bytes = it->second.bytes;
    allocations().erase(it);
  }
  munmap(p, bytes);
  return true;
}

void recordMapping(uintptr_t base, size_t bytes, int device, uint64_t handle) {
  std::lock_guard<std::mutex> lock(memoryMutex());
  Allocation a{base, bytes, Kind::kDevice, device, false, -1, false};
  a.vmm = true;
  a.handle = handle;
  allocations()[base] = a;
}

bool forgetMapping(uintptr_t base, size_t bytes) {
  std::lock_guard<std::mutex> lock(memoryMutex());
  auto it = allocations().find(base);
  if (it == allocations().end() || !it->second.vmm || it->second.bytes != bytes) return false;
  allocations().erase(it);
  return true;
}

cudaError_t registerHost(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return cudaErrorInvalidValue;
  if (findAllocation(p, nullptr)) return cudaErrorHostMemoryAlreadyRegistered;
  std::lock_guard<std::mutex> lock(memoryMutex());
  allocations()[reinterpret_cast<uintptr_t>(p)] =
      Allocation{reinterpret_cast<uintptr_t>(p), bytes, Kind::kPinned, 0, false};
  return cudaSuccess;
}

cudaError_t unregisterHost(void* p) {
  std::lock_guard<std::mutex> lock(memoryMutex());
  auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations().end() || it->second.owned) return cudaErrorHostMemoryNotRegistered;
  allocations().erase(it);
  return cudaSuccess;
}

int deviceCount() {
  const char* n = getenv("THESEUS_FAKE_CUDA_DEVICES");
  return n != nullptr ? atoi(n) : 1;
}

int& currentDevice() {
  thread_local int device = 0;
  return device;
}

bool& contextCurrent() {
  thread_local bool current = false;
  return current;
}

void* contextOf(int device) {
  static char contexts[64];
  return &contexts[device & 63];
}

cudaError_t& lastError() {
  thread_local cudaError_t e = cudaSuccess;
  return e;
}

namespace {
std::atomic<uint64_t> gSynchronizations{0};
std::atomic<uint64_t> gEventQueries{0};
}  // namespace

void countSynchronization() { gSynchronizations.fetch_add(1, std::memory_order_relaxed); }
void countEventQuery() { gEventQueries.fetch_add(1, std::memory_order_relaxed); }

namespace {
thread_local uint64_t tApiCalls = 0;
thread_local int tApiDepth = 0;
}  // namespace
ApiCall::ApiCall() {
  if (tApiDepth++ == 0) ++tApiCalls;
}
ApiCall::~ApiCall() { --tApiDepth; }

// ---- stream work ----

void Work::run() const {
  switch (kind) {
    case kCopy:
      memcpy(dst, src, n);
      return;
    case kSet:
      memset(dst, value, n);
      return;
    case kHostFn:
      hostFn(dst);
      return;
    case kBlocks: {  // a kernel: every block on a thread of its own, block 0 on the stream's worker
      std::vector<std::thread> rest;
      for (uint32_t b = 1; b < n; ++b) rest.emplace_back(blockFn, dst, b);
      blockFn(dst, 0);
      for (auto& t : rest) t.join();
      return;
    }
    case kEvent: {
      std::lock_guard<std::mutex> lock(event->mu);
      if (n > event->completed) event->completed = n;
      event->cv.notify_all();
      return;
    }
  }
}

void WorkRing::push(const Work& w) {
  if (tail_ - head_ == items_.size()) {  // full: unroll into a ring twice the size
    std::vector<Work> bigger(items_.size() * 2);
    for (size_t i = head_; i < tail_; ++i) bigger[i - head_] = items_[i % items_.size()];
    tail_ -= head_;
    head_ = 0;
    items_.swap(bigger);
  }
  items_[tail_++ % items_.size()] = w;
}

Work WorkRing::pop() { return items_[head_++ % items_.size()]; }

// ---- streams ----

namespace {

std::mutex& streamsMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::set<CUstream_st*>& streams() {
  static auto* s = new std::set<CUstream_st*>();
  return *s;
}

void workerLoop(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [s] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, nothing left
    Work w = s->queue.pop();
    s->running = true;
    lock.unlock();
    w.run();
    lock.lock();
    s->running = false;
    s->cv.notify_all();
  }
}

}  // namespace

CUstream_st* createStream() {
  auto* s = new CUstream_st();
  s->device = currentDevice();
  s->worker = std::thread(workerLoop, s);
  std::lock_guard<std::mutex> lock(streamsMutex());
  streams().insert(s);
  return s;
}

void destroyStream(CUstream_st* s) {
  {
    std::lock_guard<std::mutex> lock(streamsMutex());
    streams().erase(s);
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;  // the worker finishes what is queued first
    s->cv.notify_all();
  }
  s->worker.join();
  delete s;
}

CUstream_st* streamOf(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    static CUstream_st* legacy = createStream();
    return legacy;
  }
  return s;
}

cudaError_t enqueue(CUstream_st* s, Work w) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture == cudaStreamCaptureStatusInvalidated) return cudaErrorStreamCaptureInvalidated;
  if (s->capture == cudaStreamCaptureStatusActive) {
    s->graph->nodes.push_back(w);
    return cudaSuccess;
  }
  s->queue.push(w);
  s->cv.notify_all();
  return cudaSuccess;
}

void drain(CUstream_st* s) {
  countSynchronization();
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [s] { return s->queue.empty() && !s->running; });
}

void drainAll() {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard<std::mutex> lock(streamsMutex());
    all.assign(streams().begin(), streams().end());
  }
  for (CUstream_st* s : all) drain(s);
}

// ---- capture ----

cudaStreamCaptureMode& threadCaptureMode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

cudaError_t checkUnsafeCall() {
  if (threadCaptureMode() == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  std::vector<CUstream_st*> all;
  {
    std::lock_guard<std::mutex> lock(streamsMutex());
    all.assign(streams().begin(), streams().end());
  }
  const auto self = std::this_thread::get_id();
  bool prohibited = false;
  std::vector<CUstream_st*> affected;
  for (CUstream_st* s : all) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->capture != cudaStreamCaptureStatusActive || s->captureMode == cudaStreamCaptureModeRelaxed) continue;
    // This thread's own capture (global or thread-local) forbids it; another thread's only in global mode,
    // and only for a thread whose own mode is global.
    if (s->captureThread == self ||
        (s->captureMode == cudaStreamCaptureModeGlobal && threadCaptureMode() == cudaStreamCaptureModeGlobal)) {
      prohibited = true;
      affected.push_back(s);
    }
  }
  if (!prohibited) return cudaSuccess;
  for (CUstream_st* s : affected) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->capture = cudaStreamCaptureStatusInvalidated;  // as CUDA does: the capture sequence is unusable
  }
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t beginCapture(CUstream_st* s, cudaStreamCaptureMode mode) {
  static std::atomic<unsigned long long> ids{0};
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture != cudaStreamCaptureStatusNone) return cudaErrorIllegalState;
  s->capture = cudaStreamCaptureStatusActive;
  s->captureMode = mode;
  s->captureId = ++ids;
  s->captureThread = std::this_thread::get_id();
  s->graph = new Graph();
  return cudaSuccess;
}

cudaError_t endCapture(CUstream_st* s, Graph** out) {
  Graph* g = nullptr;
  cudaStreamCaptureStatus status;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->capture == cudaStreamCaptureStatusNone) return cudaErrorIllegalState;
    if (s->captureMode != cudaStreamCaptureModeRelaxed && s->captureThread != std::this_thread::get_id())
      return cudaErrorStreamCaptureWrongThread;
    status = s->capture;
    g = s->graph;
    s->graph = nullptr;
    s->capture = cudaStreamCaptureStatusNone;
  }
  if (status == cudaStreamCaptureStatusInvalidated) {
    destroyGraph(g);
    *out = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *out = g;
  return cudaSuccess;
}

void releaseUserObject(UserObject* o, int count) {
  if (o->refs.fetch_sub(count) == count) {
    // CUDA calls destructors on a thread of its own, where the callee may not call CUDA.
    std::thread([o] {
      o->destroy(o->ptr);
      delete o;
    }).detach();
  }
}

void destroyGraph(Graph* g) {
  if (g == nullptr) return;
  for (auto& [o, n] : g->objects) releaseUserObject(o, n);
  delete g;
}

}  // namespace fakecuda

// ---- kernel launches ----

extern "C" __attribute__((visibility("default"))) cudaError_t fakeCudaLaunchBlocks(
    cudaStream_t stream, void (*fn)(void* args, uint32_t block), void* args, uint32_t blocks) {
  FAKE_API_CALL();
  if (blocks == 0) return fakecuda::fail(cudaErrorInvalidConfiguration);
  // A kernel goes to the current device: a stream of another device is not a handle of this context.
  if (fakecuda::isExplicitStream(stream) && stream->device != fakecuda::currentDevice())
    return fakecuda::fail(cudaErrorInvalidResourceHandle);
  const fakecuda::Work w{.kind = fakecuda::Work::kBlocks, .dst = args, .n = blocks, .blockFn = fn};
  return fakecuda::fail(fakecuda::enqueue(fakecuda::streamOf(stream), w));
}

extern "C" __attribute__((visibility("default"))) uint64_t fakeCudaSynchronizations() {
  return fakecuda::gSynchronizations.load(std::memory_order_relaxed);
}

extern "C" __attribute__((visibility("default"))) uint64_t fakeCudaRegisteredHostBytes() {
  std::lock_guard<std::mutex> lock(fakecuda::memoryMutex());
  uint64_t bytes = 0;
  for (const auto& [base, a] : fakecuda::allocations())
    if (a.kind == fakecuda::Kind::kPinned && !a.owned) bytes += a.bytes;
  return bytes;
}

extern "C" __attribute__((visibility("default"))) uint64_t fakeCudaCallsOnThisThread() {
  return fakecuda::tApiCalls;
}

extern "C" __attribute__((visibility("default"))) uint64_t fakeCudaEventQueries() {
  return fakecuda::gEventQueries.load(std::memory_order_relaxed);
}
