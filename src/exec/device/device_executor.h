// The device executor: lowered plans run by the step interpreter
// (interpreter.h) over FIFOs the executor drives itself, instead of the host
// progress engine over connection objects.
//
// Today it runs in emulation only (THESEUS_DEVICE_EXECUTOR=emulate): the
// interpreter is compiled for the host, every lane is one emulated thread
// block polled by the calling thread, "device memory" is the processes'
// shared host memory and the FIFOs are the communicator's device FIFOs
// (TransportManager::deviceFifo, set up at init when the knob is on). That is
// what CI runs the collectives matrix and the hot-swap stress test through, so
// the code a GPU would run is the code CI tests, minus the hardware. The CUDA
// launch of the same interpreter is the next piece (docs/cuda-executor.md).
#pragma once

#include "exec/executor.h"

namespace theseus::exec {

enum class DeviceExecutorMode { kOff, kEmulate };

// THESEUS_DEVICE_EXECUTOR (read once; must be equal on all ranks).
DeviceExecutorMode deviceExecutorMode();

// The emulated device executor (host memory, host threads).
Executor& emulatedDeviceExecutor();

}  // namespace theseus::exec
