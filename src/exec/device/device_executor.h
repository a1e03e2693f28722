// The device executor: lowered plans run by the step interpreter
// (interpreter.h) over FIFOs the executor drives itself, instead of the host
// progress engine over connection objects.
//
// Two ways to run it:
//  * emulate: the interpreter compiled for the host, every lane one emulated
//    thread block polled by the calling thread, "device memory" the
//    processes' shared host memory, FIFOs the communicator's device FIFOs
//    (TransportManager::deviceFifo, set up at init when the mode is not off). CI
//    runs the collectives matrix and the hot-swap stress test this way, so the
//    code a GPU runs is the code CI tests, minus the hardware;
//  * cuda: the same interpreter as a CUDA kernel on the operations' streams
//    for device buffers (cuda_executor.cu; see docs/cuda-executor.md).
// Off, device buffers take the staging executor.
//
// THESEUS_DEVICE_EXECUTOR sets it for the process (must be equal on all
// ranks): auto (the default), off, cuda or emulate. Each communicator decides
// at its creation what it runs (chooseDeviceExecutor): auto is the CUDA
// executor when the build has it and every rank of the communicator uses CUDA,
// else off. Every rank decides from the same gathered facts (each rank's
// bootstrap PeerInfo::usesCuda), so all ranks of a communicator agree, which
// the lowering needs (device operations get their own channels and scratch).
#pragma once

#include <string>
#include <vector>

#include "exec/executor.h"

namespace theseus::exec {

enum class DeviceExecutorSetting { kAuto, kOff, kCuda, kEmulate };  // in kSettingNames' order (device_choice.cc)

// THESEUS_DEVICE_EXECUTOR, read once (a value that is none of the four is off, with a WARN).
DeviceExecutorSetting deviceExecutorSetting();

// What a communicator runs device buffers with, and why when that is not the CUDA executor
// (for the staging path's WARN and capture refusals).
struct DeviceExecutorChoice {
  DeviceExecutorMode mode = DeviceExecutorMode::kOff;
  std::string whyNotCuda;  // empty when mode is kCuda
};
// `usesCuda[r]`: rank r of the communicator has loaded CUDA and sees a device; `cudaBuild`: this
// build has the CUDA executor. The same inputs give the same choice on every rank.
DeviceExecutorChoice chooseDeviceExecutor(DeviceExecutorSetting setting, bool cudaBuild,
                                          const std::vector<bool>& usesCuda);

// Whether the device executor runs an operation on memory of `kind` on a communicator in `mode`:
// every one when it is emulated; device and pinned host buffers when it is CUDA (memory a kernel
// reaches, as with NVIDIA's library). The lowering gives such operations device channels and
// device scratch. It is a function of the communicator's mode (the same on every rank) and the
// buffers' kind alone, so ranks that pass device memory and ranks that pass pinned host memory
// to one operation run it alike, over the same FIFOs.
inline bool deviceExecutorRuns(DeviceExecutorMode mode, device::MemoryKind kind) {
  return mode == DeviceExecutorMode::kEmulate ||
         (mode == DeviceExecutorMode::kCuda &&
          (kind == device::MemoryKind::kDevice || kind == device::MemoryKind::kHostPinned));
}

const char* deviceExecutorModeName(DeviceExecutorMode mode);
const char* deviceExecutorSettingName(DeviceExecutorSetting setting);  // "auto", "off", "cuda", "emulate"

// The emulated device executor (host memory, host threads).
Executor& emulatedDeviceExecutor();

// The CUDA executor (cuda_executor.cu), or null in builds without CUDA.
Executor* cudaDeviceExecutor();

}  // namespace theseus::exec
