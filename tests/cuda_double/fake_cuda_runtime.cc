// The CUDA runtime API of the test double (README.md): the subset Theseus'
// CUDA executor and the GPU tests call, with the real <cuda_runtime_api.h>
// types and CUDA's semantics for streams, events, capture, graphs and user
// objects (fake_cuda_core.h).
#include <cstdio>
#include <cstring>

#include "fake_cuda_core.h"

using fakecuda::fail;
using fakecuda::Kind;

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

// A call that makes the device current (as the runtime's implicit primary context does).
void touch() { fakecuda::contextCurrent() = true; }

cudaError_t unsafe() {
  touch();
  return fakecuda::checkUnsafeCall();
}

}  // namespace

// ---- errors and devices ----

FAKE_API const char* cudaGetErrorName(cudaError_t e) {
  FAKE_API_CALL();
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    default: return "cudaErrorUnknown (test double)";
  }
}
FAKE_API const char* cudaGetErrorString(cudaError_t e) { FAKE_API_CALL(); return cudaGetErrorName(e); }
FAKE_API cudaError_t cudaGetLastError() {
  FAKE_API_CALL();
  cudaError_t e = fakecuda::lastError();
  fakecuda::lastError() = cudaSuccess;
  return e;
}
FAKE_API cudaError_t cudaPeekAtLastError() { FAKE_API_CALL(); return fakecuda::lastError(); }

FAKE_API cudaError_t cudaGetDeviceCount(int* n) {
  FAKE_API_CALL();
  *n = fakecuda::deviceCount();
  return cudaSuccess;
}
FAKE_API cudaError_t cudaSetDevice(int d) {
  FAKE_API_CALL();
  if (d < 0 || d >= fakecuda::deviceCount()) return fail(cudaErrorInvalidDevice);
  fakecuda::currentDevice() = d;
  touch();
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGetDevice(int* d) {
  FAKE_API_CALL();
  *d = fakecuda::currentDevice();
  return cudaSuccess;
}
// What the nccl-tests-compatible harness prints about a device and checks
// (compute capability): a device of its own name, so a run's log shows the
// double served it, reporting sm_90 like the H200 the GPU checks target.
FAKE_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  FAKE_API_CALL();
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= fakecuda::deviceCount()) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "Theseus CUDA test double");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->totalGlobalMem = size_t(1) << 34;
  prop->pciDeviceID = 0;
  prop->pciBusID = 0x18 + d;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  return cudaSuccess;
}
FAKE_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  FAKE_API_CALL();
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= fakecuda::deviceCount()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 4; return cudaSuccess;
    case cudaDevAttrUnifiedAddressing: *value = 1; return cudaSuccess;
    case cudaDevAttrCanMapHostMemory: *value = 1; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);  // not modelled: say so rather than invent a value
  }
}
FAKE_API cudaError_t cudaDeviceSynchronize() {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  fakecuda::drainAll();
  return cudaSuccess;
}

// ---- memory ----

FAKE_API cudaError_t cudaMalloc(void** p, size_t bytes) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  *p = fakecuda::allocate(bytes, Kind::kDevice, fakecuda::currentDevice());
  return *p != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
FAKE_API cudaError_t cudaFree(void* p) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  fakecuda::drainAll();  // cudaFree synchronises the device
  return fail(fakecuda::release(p, Kind::kDevice));
}
FAKE_API cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  *p = fakecuda::allocate(bytes, Kind::kPinned, fakecuda::currentDevice());
  return *p != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
FAKE_API cudaError_t cudaMallocHost(void** p, size_t bytes) { FAKE_API_CALL(); return cudaHostAlloc(p, bytes, 0); }
FAKE_API cudaError_t cudaFreeHost(void* p) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  return fail(fakecuda::release(p, Kind::kPinned));
}
FAKE_API cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  return fail(fakecuda::registerHost(p, bytes));
}
FAKE_API cudaError_t cudaHostUnregister(void* p) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  return fail(fakecuda::unregisterHost(p));
}
FAKE_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  FAKE_API_CALL();
  *a = cudaPointerAttributes{};
  fakecuda::Allocation al;
  if (!fakecuda::findAllocation(p, &al)) {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -1;
    return cudaSuccess;
  }
  a->type = al.kind == Kind::kDevice ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  a->device = al.device;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = al.kind == Kind::kDevice ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  fakecuda::drainAll();  // ordered after earlier work, as on the legacy stream
  memcpy(dst, src, bytes);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  FAKE_API_CALL();
  touch();
  return fail(fakecuda::enqueue(fakecuda::streamOf(s), fakecuda::Work{.kind = fakecuda::Work::kCopy, .dst = dst, .src = src, .n = bytes}));
}
FAKE_API cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  FAKE_API_CALL();
  touch();
  return fail(fakecuda::enqueue(fakecuda::streamOf(s), fakecuda::Work{.kind = fakecuda::Work::kSet, .dst = dst, .n = bytes, .value = value}));
}
FAKE_API cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  fakecuda::drainAll();
  memset(dst, value, bytes);
  return cudaSuccess;
}

// ---- streams ----

FAKE_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  FAKE_API_CALL();
  touch();
  *s = fakecuda::createStream();
  return cudaSuccess;
}
FAKE_API cudaError_t cudaStreamCreate(cudaStream_t* s) { FAKE_API_CALL(); return cudaStreamCreateWithFlags(s, 0); }
FAKE_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
  FAKE_API_CALL();
  if (s == nullptr) return fail(cudaErrorInvalidValue);
  fakecuda::destroyStream(s);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  fakecuda::drain(fakecuda::streamOf(s));
  return cudaSuccess;
}
FAKE_API cudaError_t cudaStreamQuery(cudaStream_t s) {
  FAKE_API_CALL();
  if (cudaError_t e = unsafe(); e != cudaSuccess) return fail(e);
  CUstream_st* st = fakecuda::streamOf(s);
  std::lock_guard<std::mutex> lock(st->mu);
  return st->queue.empty() && !st->running ? cudaSuccess : cudaErrorNotReady;
}
FAKE_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  FAKE_API_CALL();
  touch();
  return fail(
      fakecuda::enqueue(fakecuda::streamOf(s), fakecuda::Work{.kind = fakecuda::Work::kHostFn, .dst = data, .hostFn = fn}));
}

// ---- events ----

FAKE_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  FAKE_API_CALL();
  *e = new CUevent_st();
  (*e)->device = fakecuda::currentDevice();
  return cudaSuccess;
}
FAKE_API cudaError_t cudaEventCreate(cudaEvent_t* e) { FAKE_API_CALL(); return cudaEventCreateWithFlags(e, 0); }
FAKE_API cudaError_t cudaEventDestroy(cudaEvent_t e) {
  FAKE_API_CALL();
  delete e;
  return cudaSuccess;
}
FAKE_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  FAKE_API_CALL();
  // CUDA refuses to record an event on a stream of another device than the event's.
  if (fakecuda::isExplicitStream(s) && s->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    gen = ++e->recorded;
  }
  return fail(
      fakecuda::enqueue(fakecuda::streamOf(s), fakecuda::Work{.kind = fakecuda::Work::kEvent, .n = gen, .event = e}));
}
FAKE_API cudaError_t cudaEventQuery(cudaEvent_t e) {
  FAKE_API_CALL();
  if (cudaError_t err = unsafe(); err != cudaSuccess) return fail(err);
  fakecuda::countEventQuery();
  std::lock_guard<std::mutex> lock(e->mu);
  return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}
FAKE_API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  FAKE_API_CALL();
  if (cudaError_t err = unsafe(); err != cudaSuccess) return fail(err);
  fakecuda::countSynchronization();
  std::unique_lock<std::mutex> lock(e->mu);
  e->cv.wait(lock, [e] { return e->completed >= e->recorded; });
  return cudaSuccess;
}

// ---- capture and graphs ----

FAKE_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  FAKE_API_CALL();
  std::swap(*mode, fakecuda::threadCaptureMode());
  return cudaSuccess;
}
FAKE_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  FAKE_API_CALL();
  if (s == nullptr || s == cudaStreamLegacy) return fail(cudaErrorStreamCaptureUnsupported);
  return fail(fakecuda::beginCapture(s, mode));
}
FAKE_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  FAKE_API_CALL();
  fakecuda::Graph* g = nullptr;
  cudaError_t e = fakecuda::endCapture(s, &g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return fail(e);
}
FAKE_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  FAKE_API_CALL();
  CUstream_st* st = fakecuda::streamOf(s);
  std::lock_guard<std::mutex> lock(st->mu);
  *status = st->capture;
  return cudaSuccess;
}
FAKE_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status,
                                              unsigned long long* id, cudaGraph_t* graph,
                                              const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                              size_t* ndeps) {
  FAKE_API_CALL();
  CUstream_st* st = fakecuda::streamOf(s);
  std::lock_guard<std::mutex> lock(st->mu);
  *status = st->capture;
  if (id != nullptr) *id = st->capture == cudaStreamCaptureStatusActive ? st->captureId : 0;
  if (graph != nullptr)
    *graph = st->capture == cudaStreamCaptureStatusActive ? reinterpret_cast<cudaGraph_t>(st->graph) : nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  FAKE_API_CALL();
  fakecuda::destroyGraph(reinterpret_cast<fakecuda::Graph*>(g));
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  FAKE_API_CALL();
  auto* g = reinterpret_cast<fakecuda::Graph*>(graph);
  auto* x = new fakecuda::GraphExec{g->nodes, g->objects};
  for (auto& [o, n] : x->objects) o->refs += n;  // an executable keeps its graph's user objects too
  *exec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  FAKE_API_CALL();
  auto* x = reinterpret_cast<fakecuda::GraphExec*>(exec);
  for (const fakecuda::Work& w : x->nodes)
    if (cudaError_t e = fakecuda::enqueue(fakecuda::streamOf(s), w); e != cudaSuccess) return fail(e);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  FAKE_API_CALL();
  auto* x = reinterpret_cast<fakecuda::GraphExec*>(exec);
  for (auto& [o, n] : x->objects) fakecuda::releaseUserObject(o, n);
  delete x;
  return cudaSuccess;
}
FAKE_API cudaError_t cudaUserObjectCreate(cudaUserObject_t* out, void* ptr, cudaHostFn_t destroy,
                                          unsigned int refs, unsigned int) {
  FAKE_API_CALL();
  if (destroy == nullptr || refs == 0) return fail(cudaErrorInvalidValue);
  auto* o = new fakecuda::UserObject();
  o->ptr = ptr;
  o->destroy = destroy;
  o->refs = static_cast<int>(refs);
  *out = reinterpret_cast<cudaUserObject_t>(o);
  return cudaSuccess;
}
FAKE_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  FAKE_API_CALL();
  fakecuda::releaseUserObject(reinterpret_cast<fakecuda::UserObject*>(object), static_cast<int>(count));
  return cudaSuccess;
}
FAKE_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                               unsigned int flags) {
  FAKE_API_CALL();
  auto* g = reinterpret_cast<fakecuda::Graph*>(graph);
  auto* o = reinterpret_cast<fakecuda::UserObject*>(object);
  if (g == nullptr || o == nullptr || count == 0) return fail(cudaErrorInvalidValue);
  if (!(flags & cudaGraphUserObjectMove)) o->refs += static_cast<int>(count);  // else the caller's references move
  g->objects.push_back({o, static_cast<int>(count)});
  return cudaSuccess;
}
