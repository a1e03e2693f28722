// The CUDA device a communicator belongs to, as NCCL captures it: the device
// current on the calling thread at init. Found through the CUDA driver only if
// the process already loaded it (libcuda.so.1 is never loaded by us, so a
// CPU-only process stays CPU-only and a machine without a GPU costs nothing).
#pragma once

namespace theseus::comm {

// The calling thread's current CUDA device, or -1 when CUDA is not in use
// (driver not loaded, not initialised, or no current context).
int callerCudaDevice();
// Devices visible to the process, or -1 when unknown (CUDA not in use).
int cudaDeviceCount();

}  // namespace theseus::comm
