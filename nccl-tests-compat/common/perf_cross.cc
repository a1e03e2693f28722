// The two ways ranks combine bookkeeping values (see CrossRank):
//  * TeamCrossRank: the threads of this process combine in memory, then (under
//    mpirun) the main thread combines across processes with MPI, as nccl-tests
//    does. A single process needs nothing more.
//  * NcclCrossRank: several processes without MPI (theseus-run) use the
//    communicators being tested: every rank contributes its own values to a
//    small ncclAllReduce in the slot's scratch buffer. Gathers are all-reduce
//    sums of zero-filled buffers where each rank owns one slice, so the harness
//    depends on nothing but ncclAllReduce for its own bookkeeping.
#include <cstring>

#include "perf_context.h"

namespace theseus::perf {
namespace {

ncclRedOp_t ncclOpOf(Combine op) {
  switch (op) {
    case Combine::kSum: return ncclSum;
    case Combine::kMin: return ncclMin;
    case Combine::kMax: return ncclMax;
  }
  return ncclSum;
}

class TeamCrossRank final : public CrossRank {
 public:
  explicit TeamCrossRank(RunContext& run) : run_(run) {}

  Status combine(ThreadCtx& t, const std::vector<std::vector<double>>& perSlot, Combine op,
                 std::vector<double>* out) override {
    std::vector<double> mine = perSlot.at(0);
    for (size_t i = 1; i < perSlot.size(); ++i) combineInto(&mine, perSlot[i], op);
    std::function<Status(std::vector<double>*)> hook;
    if (run_.world.mode() == LaunchMode::kMpi)
      hook = [&](std::vector<double>* v) { return run_.world.mpiAllreduce(v, op); };
    PERF_CHECK(run_.team.allreduce(t.thread, &mine, op, hook));
    *out = mine;
    return Status::ok();
  }

  Status barrier(ThreadCtx& t) override {
    PERF_CHECK(run_.team.barrier());
    if (t.thread == 0 && run_.world.mode() == LaunchMode::kMpi) PERF_CHECK(run_.world.mpiBarrier());
    return run_.team.barrier();
  }

  Status gather(ThreadCtx& t, const std::vector<std::string>& perSlot, size_t width, std::string* all) override {
    std::string part(perSlot.size() * width, '\0');
    for (size_t i = 0; i < perSlot.size(); ++i)
      memcpy(&part[i * width], perSlot[i].data(), std::min(width, perSlot[i].size()));
    const size_t procBytes = static_cast<size_t>(run_.ranksPerProc) * width;
    const size_t offset = static_cast<size_t>(t.slots.at(0)->rank - run_.firstRank) * width;
    std::function<Status(std::string*)> hook;
    if (run_.world.mode() == LaunchMode::kMpi) {
      hook = [&](std::string* buf) {
        std::string everything(procBytes * run_.world.nprocs(), '\0');
        PERF_CHECK(run_.world.mpiAllgather(buf->data(), procBytes, everything.data()));
        *buf = std::move(everything);
        return Status::ok();
      };
    }
    return run_.team.gather(t.thread, offset, part, procBytes, hook, all);
  }

 private:
  RunContext& run_;
};

class NcclCrossRank final : public CrossRank {
 public:
  explicit NcclCrossRank(RunContext& run) : run_(run) {}

  Status combine(ThreadCtx& t, const std::vector<std::vector<double>>& perSlot, Combine op,
                 std::vector<double>* out) override {
    const size_t n = perSlot.at(0).size();
    for (size_t i = 0; i < t.slots.size(); ++i)
      PERF_CHECK(t.slots[i]->scratch.upload(0, perSlot[i].data(), n * sizeof(double), t.slots[i]->stream));
    PERF_CHECK(allreduce(t, n, ncclFloat64, ncclOpOf(op), "a bookkeeping all-reduce"));
    out->assign(n, 0.0);
    return t.slots[0]->scratch.download(0, out->data(), n * sizeof(double), t.slots[0]->stream);
  }

  Status barrier(ThreadCtx& t) override {
    std::vector<std::vector<double>> zeros(t.slots.size(), std::vector<double>(1, 0.0));
    std::vector<double> ignored;
    return combine(t, zeros, Combine::kSum, &ignored);
  }

  Status gather(ThreadCtx& t, const std::vector<std::string>& perSlot, size_t width, std::string* all) override {
    const size_t total = static_cast<size_t>(run_.nranks) * width;
    for (size_t i = 0; i < t.slots.size(); ++i) {
      std::string buf(total, '\0');
      memcpy(&buf[t.slots[i]->rank * width], perSlot[i].data(), std::min(width, perSlot[i].size()));
      PERF_CHECK(t.slots[i]->scratch.upload(0, buf.data(), total, t.slots[i]->stream));
    }
    PERF_CHECK(allreduce(t, total, ncclUint8, ncclSum, "the device-list gather"));
    all->assign(total, '\0');
    return t.slots[0]->scratch.download(0, all->data(), total, t.slots[0]->stream);
  }

 private:
  Status allreduce(ThreadCtx& t, size_t count, ncclDataType_t type, ncclRedOp_t op, const char* what) {
    {
      Watchdog::Scope scope(*run_.watchdog, t.thread, what);
      const bool group = t.slots.size() > 1;
      if (group) PERF_NCCL(ncclGroupStart());
      ncclResult_t first = ncclSuccess;
      for (RankSlot* s : t.slots) {
        ncclResult_t r = ncclAllReduce(s->scratch.data(), s->scratch.data(), count, type, op, s->comm, s->stream);
        if (r != ncclSuccess && first == ncclSuccess) first = r;
      }
      if (group) {
        ncclResult_t r = ncclGroupEnd();
        if (first == ncclSuccess) first = r;
      }
      if (first != ncclSuccess) return ncclCallError(first, strprintf("ncclAllReduce (%s)", what).c_str());
    }
    return waitForSlots(t, what);
  }

  RunContext& run_;
};

}  // namespace

std::unique_ptr<CrossRank> makeCrossRank(RunContext& run) {
  if (run.world.mode() == LaunchMode::kLauncher && run.world.nprocs() > 1)
    return std::make_unique<NcclCrossRank>(run);
  return std::make_unique<TeamCrossRank>(run);
}

}  // namespace theseus::perf
