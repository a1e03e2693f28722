// The CUDA test double's state, shared by its runtime (cuda*) and driver (cu*)
// entry points: memory the "device" owns, streams that run their work on a
// worker thread each, events, stream capture into graphs, graph executables
// and user objects. Device memory is host memory here; what matters to the
// code under test is what CUDA would tell it (the memory kind, the order of
// stream work, capture rules), not where the bytes live.
//
// Stream capture follows CUDA's rules closely enough to catch the mistakes a
// library makes: work queued on a capturing stream goes into its graph, not
// into the queue; while a capture in global or thread-local mode is active,
// "unsafe" calls (allocations, synchronisations, event queries) from a thread
// whose mode is not relaxed fail with cudaErrorStreamCaptureUnsupported and
// invalidate the capture, as cudaStreamCaptureModeGlobal/ThreadLocal specify.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

struct CUevent_st;

namespace fakecuda {

// One item of stream work, plain data built with designated initializers
// (queues and graphs copy it; nothing is allocated per item, so a warm stream
// allocates nothing — what a test of "no allocation on the warm enqueue path"
// needs from the double).
struct Work {
  enum Kind : uint8_t { kCopy, kSet, kHostFn, kBlocks, kEvent } kind = kCopy;
  void* dst = nullptr;                            // kCopy, kSet; kHostFn/kBlocks: their argument
  const void* src = nullptr;                      // kCopy
  uint64_t n = 0;                                 // kCopy, kSet: bytes; kBlocks: blocks; kEvent: generation
  int value = 0;                                  // kSet
  void (*hostFn)(void*) = nullptr;                // kHostFn
  void (*blockFn)(void*, uint32_t) = nullptr;     // kBlocks
  CUevent_st* event = nullptr;                    // kEvent
  void run() const;
};

// A growable ring of work items (grows by doubling, never shrinks).
class WorkRing {
 public:
  bool empty() const { return head_ == tail_; }
  void push(const Work& w);
  Work pop();

 private:
  std::vector<Work> items_ = std::vector<Work>(64);
  size_t head_ = 0, tail_ = 0;  // positions, modulo items_.size()
};

enum class Kind { kDevice, kPinned };
struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  Kind kind = Kind::kDevice;
  int device = 0;
  bool owned = false;  // allocated by the double (freed by it), not registered
  int fd = -1;         // device memory: the memfd behind it (what an IPC handle names)
  bool imported = false;  // another process's device memory, opened by cuIpcOpenMemHandle
  bool vmm = false;       // a mapping of a cuMemCreate/cuMemImportFromShareableHandle handle (fake_cuda_vmm.cc)
  uint64_t handle = 0;    // vmm: the handle mapped there
};
// Records a mapping of the VMM API (cuMemMap) as device memory / removes it (cuMemUnmap).
void recordMapping(uintptr_t base, size_t bytes, int device, uint64_t handle);
bool forgetMapping(uintptr_t base, size_t bytes);

// Memory known to the double. find() answers for any address inside a range.
bool findAllocation(const void* p, Allocation* out);
void* allocate(size_t bytes, Kind kind, int device);
cudaError_t release(void* p, Kind kind);
// CUDA IPC for device memory: a handle naming the allocation's memfd by pid and
// descriptor; opening maps it again (another address, same pages) in the
// opening process, as CUDA maps another process's allocation. Opening a handle
// of one's own process fails, as it does with CUDA.
bool ipcExport(const void* p, unsigned char handle[64]);
void* ipcOpen(const unsigned char handle[64], int device);
bool ipcClose(void* p);
cudaError_t registerHost(void* p, size_t bytes);
cudaError_t unregisterHost(void* p);

int deviceCount();
int& currentDevice();         // of the calling thread (cudaSetDevice)
bool& contextCurrent();       // the calling thread has made a device current
void* contextOf(int device);  // a stable pointer per device: its "context"
// A stream handle of a device of its own (not NULL, legacy or per-thread, which follow the caller).
inline bool isExplicitStream(cudaStream_t s) {
  return s != nullptr && s != cudaStreamLegacy && s != cudaStreamPerThread;
}

struct Graph;
struct UserObject;

}  // namespace fakecuda

struct CUstream_st {
  int device = 0;
  std::mutex mu;
  std::condition_variable cv;
  fakecuda::WorkRing queue;
  bool running = false;  // the worker is executing an item
  bool stop = false;
  std::thread worker;
  // Capture (under mu).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamCaptureMode captureMode = cudaStreamCaptureModeGlobal;
  unsigned long long captureId = 0;
  std::thread::id captureThread;
  fakecuda::Graph* graph = nullptr;
};

struct CUevent_st {
  int device = 0;  // where it was created: it may be recorded only on that device's streams
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // generations recorded
  uint64_t completed = 0;  // generations whose preceding work finished
};

namespace fakecuda {

struct UserObject {
  void* ptr = nullptr;
  cudaHostFn_t destroy = nullptr;
  std::atomic<int> refs{0};
};
void releaseUserObject(UserObject* o, int count);

struct Graph {
  std::vector<Work> nodes;
  std::vector<std::pair<UserObject*, int>> objects;
};
struct GraphExec {
  std::vector<Work> nodes;
  std::vector<std::pair<UserObject*, int>> objects;
};

// The stream an API handle means (NULL and the legacy/per-thread handles: the default stream).
CUstream_st* streamOf(cudaStream_t s);
// Queues `w` on the stream, or adds it to the stream's graph while it is captured.
cudaError_t enqueue(CUstream_st* s, Work w);
// Waits until the stream ran everything queued before the call.
void drain(CUstream_st* s);
// Waits for every stream (cudaDeviceSynchronize, synchronous copies).
void drainAll();
CUstream_st* createStream();
void destroyStream(CUstream_st* s);

// Capture rules: the error an unsafe call from this thread gets now (cudaSuccess when allowed).
cudaError_t checkUnsafeCall();
cudaStreamCaptureMode& threadCaptureMode();
cudaError_t beginCapture(CUstream_st* s, cudaStreamCaptureMode mode);
cudaError_t endCapture(CUstream_st* s, Graph** out);
void destroyGraph(Graph* g);

// Calls that wait for the device (stream, event and device synchronisations, synchronous copies):
// counted for fakeCudaSynchronizations().
void countSynchronization();
void countEventQuery();  // cudaEventQuery calls (fakeCudaEventQueries)

// Every exported call of the double opens with FAKE_API_CALL(): the calling
// thread's count of calls into CUDA (fakeCudaCallsOnThisThread), what a test
// of the enqueue path holds down since each is a real driver call on a GPU.
// Calls the double makes into its own entry points (cudaMallocHost into
// cudaHostAlloc) count once.
class ApiCall {
 public:
  ApiCall();
  ~ApiCall();
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;
};
#define FAKE_API_CALL() const fakecuda::ApiCall fakeApiCall_

cudaError_t& lastError();  // thread-local, for cudaGetLastError
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) lastError() = e;
  return e;
}

}  // namespace fakecuda

// The double's kernel launch: `fn(args, block)` for every block of the grid,
// the blocks concurrently (a host thread each), as stream work (or a graph
// node while the stream is captured). The library's host launcher
// (launch_on_host.cc) calls it where the real build launches the kernel.
extern "C" cudaError_t fakeCudaLaunchBlocks(cudaStream_t stream, void (*fn)(void* args, uint32_t block), void* args,
                                            uint32_t blocks);

// How many calls so far waited for the device (any thread): lets a test check
// that an enqueue path never synchronises. Declared weak by callers that may
// run against the real CUDA too.
extern "C" uint64_t fakeCudaSynchronizations();
// Bytes of host memory registered (cudaHostRegister, cuMemHostRegister) and not yet unregistered.
extern "C" uint64_t fakeCudaRegisteredHostBytes();
// How many calls into CUDA (runtime and driver, launches included) this thread has made.
extern "C" uint64_t fakeCudaCallsOnThisThread();
