// The device executor: lowered plans run by the step interpreter
// (interpreter.h) over FIFOs the executor drives itself, instead of the host
// progress engine over connection objects.
//
// Two ways to run it (THESEUS_DEVICE_EXECUTOR, equal on all ranks):
//  * emulate: the interpreter compiled for the host, every lane one emulated
//    thread block polled by the calling thread, "device memory" the
//    processes' shared host memory, FIFOs the communicator's device FIFOs
//    (TransportManager::deviceFifo, set up at init when the knob is on). CI
//    runs the collectives matrix and the hot-swap stress test this way, so the
//    code a GPU runs is the code CI tests, minus the hardware;
//  * cuda: the same interpreter as a CUDA kernel on the operations' streams
//    for device buffers (cuda_executor.cu; see docs/cuda-executor.md).
// Off (the default), device buffers take the staging executor.
#pragma once

#include "exec/executor.h"

namespace theseus::exec {

enum class DeviceExecutorMode { kOff, kEmulate, kCuda };

// THESEUS_DEVICE_EXECUTOR (read once; must be equal on all ranks).
DeviceExecutorMode deviceExecutorMode();

// Whether the device executor runs an operation on memory of `kind`: every one when it is emulated, device
// buffers when it is CUDA (the lowering gives such operations device channels and device scratch).
inline bool deviceExecutorRuns(device::MemoryKind kind) {
  const DeviceExecutorMode mode = deviceExecutorMode();
  return mode == DeviceExecutorMode::kEmulate || (mode == DeviceExecutorMode::kCuda && kind == device::MemoryKind::kDevice);
}

// The emulated device executor (host memory, host threads).
Executor& emulatedDeviceExecutor();

// The CUDA executor (cuda_executor.cu), or null in builds without CUDA.
Executor* cudaDeviceExecutor();

}  // namespace theseus::exec
