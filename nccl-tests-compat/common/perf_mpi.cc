// MPI glue for runs under mpirun (built when MPI is found). Only the main
// thread calls MPI (MPI_THREAD_FUNNELED).
#include <mpi.h>

#include "perf_world.h"

namespace theseus::perf::mpi {
namespace {

Status mpiCheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return errorf(kExitError, "%s failed: %s", what, msg);
}

MPI_Op mpiOp(Combine op) {
  switch (op) {
    case Combine::kSum: return MPI_SUM;
    case Combine::kMin: return MPI_MIN;
    case Combine::kMax: return MPI_MAX;
  }
  return MPI_SUM;
}

}  // namespace

bool builtWithMpi() { return true; }

Status init(int* argc, char*** argv, int* rank, int* size, int* localRank) {
  int provided = 0;
  PERF_CHECK(mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread"));
  PERF_CHECK(mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank"));
  PERF_CHECK(mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size"));
  MPI_Comm local;
  PERF_CHECK(mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local),
                      "MPI_Comm_split_type"));
  PERF_CHECK(mpiCheck(MPI_Comm_rank(local, localRank), "MPI_Comm_rank(local)"));
  MPI_Comm_free(&local);
  return Status::ok();
}

Status bcast(void* buf, size_t bytes, int root) {
  return mpiCheck(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

Status allreduce(double* values, int n, Combine op) {
  return mpiCheck(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, mpiOp(op), MPI_COMM_WORLD), "MPI_Allreduce");
}

Status barrier() { return mpiCheck(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

Status allgather(const void* mine, size_t bytes, void* all) {
  return mpiCheck(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE,
                                MPI_COMM_WORLD),
                  "MPI_Allgather");
}

void finalize() { MPI_Finalize(); }

}  // namespace theseus::perf::mpi
