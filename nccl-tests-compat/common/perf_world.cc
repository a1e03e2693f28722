#include "perf_world.h"

#include <cerrno>
#include <cstdlib>

namespace theseus::perf {
namespace {

// Reads an integer environment variable; false if unset.
Status envInt(const char* name, int* out, bool* present) {
  const char* v = getenv(name);
  *present = v != nullptr && v[0] != '\0';
  if (!*present) return Status::ok();
  char* end = nullptr;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 24)
    return usageError("%s='%s' is not a non-negative integer", name, v);
  *out = static_cast<int>(x);
  return Status::ok();
}

bool anySet(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (getenv(n) != nullptr) return true;
  return false;
}

}  // namespace

const char* launchModeName(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kSingle: return "single process";
    case LaunchMode::kLauncher: return "theseus-run";
    case LaunchMode::kMpi: return "MPI";
  }
  return "?";
}

Status detectLaunch(bool builtWithMpi, LaunchEnv* out) {
  LaunchEnv env;
  bool hasRank = false, hasSize = false, hasLocal = false;
  PERF_CHECK(envInt("THESEUS_RANK", &env.proc, &hasRank));
  PERF_CHECK(envInt("THESEUS_NRANKS", &env.nprocs, &hasSize));
  PERF_CHECK(envInt("THESEUS_LOCAL_RANK", &env.localProc, &hasLocal));
  if (hasRank || hasSize) {
    if (!hasRank || !hasSize) return usageError("THESEUS_RANK and THESEUS_NRANKS must be set together");
    if (env.nprocs < 1 || env.proc >= env.nprocs)
      return usageError("THESEUS_RANK=%d is not in [0, THESEUS_NRANKS=%d)", env.proc, env.nprocs);
    const char* commId = getenv("NCCL_COMM_ID");
    if (env.nprocs > 1 && (commId == nullptr || commId[0] == '\0'))
      return usageError("THESEUS_NRANKS=%d but NCCL_COMM_ID is not set, so every process would create its own "
                        "unique id: launch with theseus-run, or set NCCL_COMM_ID=<host>:<port> for all ranks",
                        env.nprocs);
    if (!hasLocal) env.localProc = env.proc;
    env.mode = LaunchMode::kLauncher;
  } else if (anySet({"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})) {
    if (!builtWithMpi)
      return usageError("started by an MPI launcher but this harness was built without MPI; "
                        "rebuild with MPI or use theseus-run");
    env.mode = LaunchMode::kMpi;  // rank and size come from MPI_Init
  }
  *out = env;
  return Status::ok();
}

Status World::create(int* argc, char*** argv, std::unique_ptr<World>* out) {
  LaunchEnv env;
  PERF_CHECK(detectLaunch(mpi::builtWithMpi(), &env));
  std::unique_ptr<World> w(new World(env));
  if (env.mode == LaunchMode::kMpi) {
    PERF_CHECK(mpi::init(argc, argv, &w->env_.proc, &w->env_.nprocs, &w->env_.localProc));
    w->mpiInitialized_ = true;
  }
  *out = std::move(w);
  return Status::ok();
}

World::~World() {
  if (mpiInitialized_) mpi::finalize();
}

Status World::uniqueId(ncclUniqueId* id) {
  if (env_.mode != LaunchMode::kMpi || env_.proc == 0) PERF_NCCL(ncclGetUniqueId(id));
  if (env_.mode == LaunchMode::kMpi) PERF_CHECK(mpi::bcast(id, sizeof(*id), 0));
  return Status::ok();
}

Status World::mpiAllreduce(std::vector<double>* values, Combine op) {
  return mpi::allreduce(values->data(), static_cast<int>(values->size()), op);
}

Status World::mpiBarrier() { return mpi::barrier(); }

Status World::mpiAllgather(const void* mine, size_t bytes, void* all) { return mpi::allgather(mine, bytes, all); }

}  // namespace theseus::perf
