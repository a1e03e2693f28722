// MPI glue when the harness is built without MPI: never called (detectLaunch
// refuses MPI launches), but every function explains itself if it is.
#include "perf_world.h"

namespace theseus::perf::mpi {
namespace {
Status noMpi() { return errorf(kExitUsage, "this harness was built without MPI"); }
}  // namespace

bool builtWithMpi() { return false; }
Status init(int*, char***, int*, int*, int*) { return noMpi(); }
Status bcast(void*, size_t, int) { return noMpi(); }
Status allreduce(double*, int, Combine) { return noMpi(); }
Status barrier() { return noMpi(); }
Status allgather(const void*, size_t, void*) { return noMpi(); }
void finalize() {}

}  // namespace theseus::perf::mpi
