// The processes of a run and how they find each other.
//
//  * theseus-run (THESEUS_RANK / THESEUS_NRANKS set, NCCL_COMM_ID set): one
//    rank group per process; every process calls ncclGetUniqueId, which
//    returns the same NCCL_COMM_ID-derived id everywhere without networking.
//  * mpirun (built with MPI, OMPI/PMI/PMIx rank variables set): process 0
//    creates the id and broadcasts it with MPI_Bcast; results are combined
//    with MPI like nccl-tests.
//  * otherwise a single process.
// THESEUS_RANK wins over MPI variables, so theseus-run works for MPI builds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf_status.h"

namespace theseus::perf {

enum class LaunchMode { kSingle, kLauncher, kMpi };
enum class Combine { kSum, kMin, kMax };

const char* launchModeName(LaunchMode mode);

// Decides the launch mode from the environment (exposed for tests).
struct LaunchEnv {
  LaunchMode mode = LaunchMode::kSingle;
  int proc = 0;
  int nprocs = 1;
  int localProc = 0;
};
Status detectLaunch(bool builtWithMpi, LaunchEnv* out);

class World {
 public:
  static Status create(int* argc, char*** argv, std::unique_ptr<World>* out);
  ~World();

  LaunchMode mode() const { return env_.mode; }
  int proc() const { return env_.proc; }
  int nprocs() const { return env_.nprocs; }
  int localProc() const { return env_.localProc; }

  // Collective over processes: every process gets the same id.
  Status uniqueId(ncclUniqueId* id);

  // MPI mode only (main thread): element-wise combination over processes,
  // barrier, and an all-gather of `bytes` from each process.
  Status mpiAllreduce(std::vector<double>* values, Combine op);
  Status mpiBarrier();
  Status mpiAllgather(const void* mine, size_t bytes, void* all);

 private:
  explicit World(LaunchEnv env) : env_(env) {}
  LaunchEnv env_;
  bool mpiInitialized_ = false;
};

// MPI glue (perf_mpi.cc when MPI is found, perf_mpi_none.cc otherwise).
namespace mpi {
bool builtWithMpi();
Status init(int* argc, char*** argv, int* rank, int* size, int* localRank);
Status bcast(void* buf, size_t bytes, int root);
Status allreduce(double* values, int n, Combine op);
Status barrier();
Status allgather(const void* mine, size_t bytes, void* all);
void finalize();
}  // namespace mpi

}  // namespace theseus::perf
