// Command line of the *_perf binaries: nccl-tests' flags with nccl-tests'
// meanings and defaults (reference §3.3), plus --host, --malloc and --in_place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "perf_status.h"
#include "perf_types.h"

namespace theseus::perf {

enum class MemoryMode : uint8_t {
  kAuto,    // CUDA buffers when built with CUDA and a GPU is visible, else host buffers
  kHost,    // --host: host buffers even when a GPU is present
};

struct Options {
  int nThreads = 1;            // -t
  int nGpus = 1;               // -g: ranks per thread
  size_t minBytes = 32u << 20;  // -b
  size_t maxBytes = 32u << 20;  // -e
  size_t stepBytes = 1u << 20;  // -i
  uint64_t stepFactor = 1;      // -f (1: disabled, use stepBytes)
  int iters = 20;               // -n
  int warmupIters = 1;          // -w
  int aggIters = 1;             // -m
  int runCycles = 1;            // -N (0: forever)
  bool parallelInit = false;    // -p
  int check = 1;                // -c
  std::vector<OpKind> ops{OpKind::kSum};            // -o
  bool opsAll = false;                              // -o all (skips what NCCL has no kernel for)
  std::vector<ncclDataType_t> types{ncclFloat32};   // -d
  int root = 0;                 // -r (-1 or "all": every root in turn)
  int blocking = 0;             // -z (0..3)
  bool streamNull = false;      // -y
  double timeoutSec = 0;        // -T (0: none)
  int graphLaunches = 0;        // -G (only 0 is supported)
  bool reportCpuTime = false;   // -C
  int average = 1;              // -a: 0 rank 0, 1 avg, 2 min, 3 max
  int localRegister = 0;        // -R: 1 ncclCommRegister, 2 ncclCommWindowRegister
  int ctaPolicy = -1;           // -x (-1: leave the config default)
  size_t unalign = 0;           // -u (elements)
  std::string jsonPath;         // -J
  MemoryMode memory = MemoryMode::kAuto;  // --host
  bool useMalloc = false;       // --malloc: plain malloc (cudaMalloc on GPUs) instead of ncclMemAlloc
  bool inPlace = true;          // --in_place 0: leave the in-place half out (its columns read N/A)
  bool help = false;            // -h
};

// Parses argv[1..argc). Errors are usage errors with a one-line explanation.
Status parseOptions(int argc, const char* const* argv, Options* out);
// "8", "64K", "32M", "1G" (K/M/G are binary multiples, case-insensitive).
Status parseSize(const std::string& text, size_t* out);
std::string usageText(const char* program);
// The sizes of the sweep: minBytes, then *stepFactor (or +stepBytes) while <= maxBytes.
std::vector<size_t> sweepSizes(const Options& opts);

}  // namespace theseus::perf
