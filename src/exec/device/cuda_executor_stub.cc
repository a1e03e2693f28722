// Builds without CUDA have no CUDA executor (cuda_executor.cu).
#include "exec/device/device_executor.h"

namespace theseus::exec {

Executor* cudaDeviceExecutor() { return nullptr; }

}  // namespace theseus::exec
