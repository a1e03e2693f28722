// The ABI client compiled as C++ against our nccl.h (see abi_client.c).
#include "abi_client.c"
