// Which CUDA driver queries a stream capture survives (a tool gpu-check runs, not a test).
// Theseus' enqueue path asks the driver about buffers and streams; in CUDA's global capture
// mode a call the driver counts as unsafe invalidates every capture in the process, and the
// first GPU run showed one of them doing so. For each query this begins a global-mode capture
// on a non-blocking stream, makes the call, and prints its result, whether the capture is
// still active and what cudaStreamEndCapture says.
#include <dlfcn.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>

namespace {

const char* captureName(CUstreamCaptureStatus s) {
  switch (s) {
    case CU_STREAM_CAPTURE_STATUS_NONE: return "none";
    case CU_STREAM_CAPTURE_STATUS_ACTIVE: return "active";
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED: return "INVALIDATED";
  }
  return "?";
}

int probe(cudaStream_t stream, cudaStreamCaptureMode mode, const char* name, const std::function<CUresult()>& call) {
  if (cudaStreamBeginCapture(stream, mode) != cudaSuccess) {
    printf("%-28s cannot begin a capture\n", name);
    return 1;
  }
  CUresult rc = call();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &status);
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  const char* rcName = nullptr;
  cuGetErrorName(rc, &rcName);
  printf("%-28s %-10s rc=%-36s capture=%-12s end=%s\n", name,
         mode == cudaStreamCaptureModeGlobal ? "global" : "thread", rcName ? rcName : "?", captureName(status),
         cudaGetErrorName(end));
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE && end == cudaSuccess ? 0 : 1;
}

}  // namespace

int main() {
  cudaStream_t stream;
  void* buf = nullptr;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&buf, 1 << 20) != cudaSuccess) {
    printf("capture_probe: no usable GPU\n");
    return 2;
  }
  const auto ptr = reinterpret_cast<CUdeviceptr>(buf);
  const auto s = reinterpret_cast<CUstream>(stream);
  struct Query {
    const char* name;
    std::function<CUresult()> call;
  } queries[] = {
      {"cuPointerGetAttribute(type)", [&] { unsigned t; return cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr); }},
      {"cuPointerGetAttribute(dev)", [&] { int d; return cuPointerGetAttribute(&d, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr); }},
      {"cuPointerGetAttributes(type, dev)", [&] {
         unsigned t;
         int d;
         CUpointer_attribute a[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
         void* data[] = {&t, &d};
         return cuPointerGetAttributes(2, a, data, ptr);
       }},
      {"cuMemGetAddressRange", [&] { CUdeviceptr b; size_t n; return cuMemGetAddressRange(&b, &n, ptr + 64); }},
      {"cuStreamGetDevice", [&] { CUdevice d; return cuStreamGetDevice(s, &d); }},
      {"cuStreamGetCtx", [&] { CUcontext c; return cuStreamGetCtx(s, &c); }},
      {"cuStreamGetCaptureInfo_v2", [&] {  // the symbol Theseus' driver leaf looks up (CUDA 13's header names _v3)
         using Fn = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**, size_t*);
         auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v2"));
         if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
         CUstreamCaptureStatus st;
         cuuint64_t id;
         CUgraph g;
         return fn(s, &st, &id, &g, nullptr, nullptr);
       }},
      {"cuCtxGetCurrent", [&] { CUcontext c; return cuCtxGetCurrent(&c); }},
      {"cuCtxGetDevice", [&] { CUdevice d; return cuCtxGetDevice(&d); }},
      {"cuIpcGetMemHandle", [&] { CUipcMemHandle h; return cuIpcGetMemHandle(&h, ptr); }},
  };
  int unsafe = 0;
  for (const Query& q : queries)
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal})
      unsafe += probe(stream, mode, q.name, q.call);
  printf("capture_probe: %d of %zu calls broke a capture\n", unsafe, 2 * sizeof(queries) / sizeof(queries[0]));
  return 0;
}
