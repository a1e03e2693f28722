// The CUDA executor's host code (src/exec/device/cuda_executor.cu: no device
// code in it) compiled by the host compiler, for the library built against
// the CUDA test double: what runs in CI is that file itself.
#include "exec/device/cuda_executor.cu"
