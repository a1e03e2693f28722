// Ranks of one communicator that are different processes on one GPU (single-GPU
// rigs, several jobs' ranks on a GPU). NVIDIA's library refuses such a
// communicator; Theseus runs it. With the CUDA executor the kernels of those
// processes run side by side only under MPS: without it the GPU time-slices
// between the processes' contexts, and a kernel waiting for its peer's message
// waits for the peer's slice (about 2.5 ms per message round on an H200, the
// first GPU run). So it is said once per process, at WARN, unless an MPS
// control daemon is found.
#pragma once

#include <cstdint>
#include <string>

#include "bootstrap/bootstrap.h"

namespace theseus::comm {

// What a rank reports of its GPU at bootstrap (PeerInfo::gpuHash): a hash of its PCI bus id, 0 for "".
uint64_t gpuHashOf(const std::string& busId);

// Whether an MPS control daemon runs for this process ($CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps, holds
// its control pipe).
bool mpsControlFound();

// Ranks of the communicator on this rank's GPU (the same PeerInfo::gpuHash on this host), this one included;
// 1 for a rank without a GPU.
int ranksOnGpu(const bootstrap::Bootstrap& bs);

// Called at a communicator's creation when it runs the CUDA executor: the WARN above when another process's
// rank on this host shares this rank's GPU (`busId`: this rank's, for the message).
void noteSharedGpus(const bootstrap::Bootstrap& bs, const std::string& busId);

}  // namespace theseus::comm
