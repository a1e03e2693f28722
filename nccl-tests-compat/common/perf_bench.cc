#include "perf_bench.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "perf_cuda.h"

namespace theseus::perf {
namespace {

// One (datatype, operation, root, size) point of the sweep.
struct Case {
  ncclDataType_t type = ncclFloat32;
  size_t es = 4;
  bool usesOp = false;
  OpKind op = OpKind::kSum;
  int root = -1;
  size_t bytes = 0;
  CollCounts counts;
};

Case makeCase(const RunContext& run, ncclDataType_t type, bool usesOp, OpKind op, int root, size_t bytes) {
  Case c;
  c.type = type;
  c.es = typeInfo(type).size;
  c.usesOp = usesOp;
  c.op = op;
  c.root = root;
  c.bytes = bytes;
  c.counts = run.test.counts(bytes / c.es, c.es, run.nranks);
  return c;
}

std::string describe(const RunContext& run, const Case& c, bool inPlace) {
  return strprintf("%s %s (%zu B, %s%s%s)", run.test.program(), inPlace ? "in-place" : "out-of-place",
                   std::max(c.counts.sendCount, c.counts.recvCount) * c.es, typeInfo(c.type).name,
                   c.usesOp ? " " : "", c.usesOp ? opName(c.op) : "");
}

void pointers(const RunContext& run, const RankSlot& s, const Case& c, bool inPlace, size_t* sendOff,
              size_t* recvOff) {
  const size_t ua = run.opts.unalign * c.es;
  if (inPlace) {
    *sendOff = ua + c.counts.sendInplaceOffset * s.rank * c.es;
    *recvOff = ua + c.counts.recvInplaceOffset * s.rank * c.es;
  } else {
    *sendOff = ua;
    *recvOff = ua;
  }
}

// Issues the operation on one rank. A mulsum op is created right before the
// call and destroyed right after it, inside the group, as nccl-tests does.
Status issueOne(const RunContext& run, RankSlot& s, const Case& c, bool inPlace, int step) {
  size_t sendOff, recvOff;
  pointers(run, s, c, inPlace, &sendOff, &recvOff);
  CollCall call;
  call.sendbuff = (inPlace ? s.recv.data() : s.send.data()) + sendOff;
  call.recvbuff = s.recv.data() + recvOff;
  call.count = c.counts.paramCount;
  call.type = c.type;
  call.root = c.root < 0 ? 0 : c.root;
  call.rank = s.rank;
  call.nranks = run.nranks;
  call.comm = s.comm;
  call.stream = s.stream;
  const bool mulsum = c.usesOp && c.op == OpKind::kMulSum;
  if (mulsum) {
    uint64_t scalar = 0;
    InputModel(c.type, c.op, run.nranks, 0).fillScalar(s.rank, &scalar);
    PERF_NCCL(ncclRedOpCreatePreMulSum(&call.op, &scalar, c.type, ncclScalarHostImmediate, s.comm));
  } else if (c.usesOp) {
    call.op = builtinOp(c.op);
  }
  ncclResult_t r = run.test.run(call, step);
  ncclResult_t d = mulsum ? ncclRedOpDestroy(call.op, s.comm) : ncclSuccess;
  if (r != ncclSuccess) return ncclCallError(r, run.test.program());
  if (d != ncclSuccess) return ncclCallError(d, "ncclRedOpDestroy");
  return Status::ok();
}

// One operation on every rank of this thread: each step in one group when the
// thread drives several ranks.
Status issue(ThreadCtx& t, const Case& c, bool inPlace) {
  const bool group = t.slots.size() > 1;
  const int steps = t.run.test.steps(t.run.nranks);
  for (int step = 0; step < steps; ++step) {
    if (group) PERF_NCCL(ncclGroupStart());
    Status first;
    for (RankSlot* s : t.slots) {
      Status st = issueOne(t.run, *s, c, inPlace, step);
      if (!st.isOk() && first.isOk()) first = st.withContext(strprintf("rank %d", s->rank));
    }
    if (group) {
      ncclResult_t r = ncclGroupEnd();
      if (r != ncclSuccess && first.isOk()) first = ncclCallError(r, "ncclGroupEnd");
    }
    PERF_CHECK(first);
  }
  return Status::ok();
}

Status issueAndWait(ThreadCtx& t, const Case& c, bool inPlace, const std::string& what) {
  {
    Watchdog::Scope scope(*t.run.watchdog, t.thread, what);
    PERF_CHECK(issue(t, c, inPlace));
  }
  return waitForSlots(t, what.c_str());
}

// The timed loop: iters x agg_iters operations, -m aggregated in one group
// unless -z 1/2 asks for a sync after every operation.
Status timedLoop(ThreadCtx& t, const Case& c, bool inPlace, const std::string& what, double* wallSec,
                 double* cpuSec) {
  const Options& o = t.run.opts;
  const bool perOpSync = o.blocking == 1 || o.blocking == 2;
  // Multi-step collectives cannot share a group across iterations either.
  const bool aggGroup = o.aggIters > 1 && !perOpSync && t.run.test.steps(t.run.nranks) == 1;
  const int64_t start = monotonicNs();
  for (int iter = 0; iter < o.iters; ++iter) {
    if (aggGroup) PERF_NCCL(ncclGroupStart());
    for (int a = 0; a < o.aggIters; ++a) {
      Status s;
      {
        Watchdog::Scope scope(*t.run.watchdog, t.thread, what);
        s = issue(t, c, inPlace);
      }
      if (!s.isOk()) {
        if (aggGroup) (void)ncclGroupEnd();
        return s;
      }
      if (perOpSync) {
        PERF_CHECK(waitForSlots(t, what.c_str()));
        if (o.blocking == 1) PERF_CHECK(t.run.cross->barrier(t));
      }
    }
    if (aggGroup) {
      Watchdog::Scope scope(*t.run.watchdog, t.thread, what);
      PERF_NCCL(ncclGroupEnd());
    }
    if (o.blocking == 3) {
      PERF_CHECK(waitForSlots(t, what.c_str()));
      PERF_CHECK(t.run.cross->barrier(t));
    }
  }
  const int64_t enqueued = monotonicNs();
  PERF_CHECK(waitForSlots(t, what.c_str()));
  const int64_t end = monotonicNs();
  const double n = static_cast<double>(o.iters) * o.aggIters;
  *wallSec = n > 0 ? (end - start) / 1e9 / n : 0;
  *cpuSec = n > 0 ? (enqueued - start) / 1e9 / n : 0;
  return Status::ok();
}

// Writes this rank's inputs and poisons its output region (see fillPoison),
// returning the expected output (empty where the output is undefined).
Status prepareCheck(ThreadCtx& t, RankSlot& s, const Case& c, bool inPlace, const InputModel& model,
                    std::vector<char>* expected) {
  const CollCounts& k = c.counts;
  size_t sendOff, recvOff;
  pointers(t.run, s, c, inPlace, &sendOff, &recvOff);
  std::vector<char> input(k.sendCount * c.es);
  model.fillInput(s.rank, 0, k.sendCount, input.data());
  expected->clear();
  if (t.run.test.hasOutput(s.rank, c.root)) {
    expected->resize(k.recvCount * c.es);
    t.run.test.expected(model, s.rank, c.root, k, expected->data());
    std::vector<char> poison(expected->size());
    fillPoison(c.es, expected->data(), k.recvCount, poison.data());
    PERF_CHECK(s.recv.upload(recvOff, poison.data(), poison.size(), s.stream));
  }
  // In place, the input lives inside the receive buffer and wins over the poison.
  Buffer& dst = inPlace ? s.recv : s.send;
  return dst.upload(sendOff, input.data(), input.size(), s.stream);
}

Status compareOne(ThreadCtx& t, RankSlot& s, const Case& c, bool inPlace, const InputModel& model,
                  const std::vector<char>& expected, double* wrong) {
  *wrong = 0;
  if (!t.run.test.hasOutput(s.rank, c.root)) return Status::ok();
  size_t sendOff, recvOff;
  pointers(t.run, s, c, inPlace, &sendOff, &recvOff);
  std::vector<char> got(expected.size());
  PERF_CHECK(s.recv.download(recvOff, got.data(), got.size(), s.stream));
  size_t first = SIZE_MAX;
  size_t bad = countMismatches(c.type, got.data(), expected.data(), c.counts.recvCount, model.toleranceUlps(), &first);
  if (bad > 0) {
    uint64_t g = loadBits(got.data(), first, c.es), e = loadBits(expected.data(), first, c.es);
    fprintf(stderr, "%s: rank %d: %s: %zu wrong element(s), first at index %zu: got 0x%0*" PRIx64
            " expected 0x%0*" PRIx64 "\n", t.run.test.program(), s.rank, describe(t.run, c, inPlace).c_str(), bad,
            first, static_cast<int>(2 * c.es), g, static_cast<int>(2 * c.es), e);
  }
  *wrong = static_cast<double>(bad);
  return Status::ok();
}

// One -c iteration over every rank of this thread; `wrongPerSlot` gets counts.
Status checkOnce(ThreadCtx& t, const Case& c, bool inPlace, const std::string& what,
                 std::vector<std::vector<double>>* wrongPerSlot) {
  const uint64_t seed = ++t.checkRep;  // the same sequence on every rank
  // Reductions get inputs made for their operation; data movement gets full-range values.
  InputModel model(c.type, c.usesOp ? c.op : OpKind::kMax, t.run.nranks, seed);
  std::vector<std::vector<char>> expected(t.slots.size());
  for (size_t i = 0; i < t.slots.size(); ++i)
    PERF_CHECK(prepareCheck(t, *t.slots[i], c, inPlace, model, &expected[i]));
  PERF_CHECK(issueAndWait(t, c, inPlace, what));
  wrongPerSlot->assign(t.slots.size(), std::vector<double>(1, 0.0));
  for (size_t i = 0; i < t.slots.size(); ++i)
    PERF_CHECK(compareOne(t, *t.slots[i], c, inPlace, model, expected[i], &(*wrongPerSlot)[i][0]));
  return Status::ok();
}

Status measure(ThreadCtx& t, const Case& c, bool inPlace, Measurement* m) {
  RunContext& run = t.run;
  const Options& o = run.opts;
  const std::string what = describe(run, c, inPlace);
  PERF_CHECK(issueAndWait(t, c, inPlace, what));  // untimed: connections, first touch
  PERF_CHECK(run.cross->barrier(t));
  double wall = 0, cpu = 0;
  PERF_CHECK(timedLoop(t, c, inPlace, what, &wall, &cpu));
  double sec = o.reportCpuTime ? cpu : wall;
  if (o.average != 0) {
    static const Combine kCombine[4] = {Combine::kSum, Combine::kSum, Combine::kMin, Combine::kMax};
    std::vector<std::vector<double>> mine(t.slots.size(), std::vector<double>(1, sec));
    std::vector<double> all;
    PERF_CHECK(run.cross->combine(t, mine, kCombine[o.average], &all));
    sec = o.average == 1 ? all[0] / run.nranks : all[0];
  }
  m->usec = sec * 1e6;
  if (sec > 0) {
    run.test.bandwidth(c.counts.paramCount, c.es, sec, run.nranks, &m->algBw, &m->busBw);
  } else {
    m->algBw = m->busBw = 0;
  }
  if (o.check > 0 && (!inPlace || run.test.checksInPlace())) {
    double wrong = 0;
    for (int i = 0; i < o.check && wrong == 0; ++i) {
      std::vector<std::vector<double>> mine;
      PERF_CHECK(checkOnce(t, c, inPlace, what, &mine));
      std::vector<double> all;
      PERF_CHECK(run.cross->combine(t, mine, Combine::kSum, &all));
      wrong = all[0];
    }
    m->wrong = wrong;
  }
  return Status::ok();
}

void printNow(const ThreadCtx& t, const std::string& text) {
  if (!t.printer) return;
  fputs(text.c_str(), stdout);
  fflush(stdout);
}

Status timeTest(ThreadCtx& t, ncclDataType_t type, bool usesOp, OpKind op, int root) {
  RunContext& run = t.run;
  const Options& o = run.opts;
  PERF_CHECK(run.cross->barrier(t));
  for (size_t bytes : {o.maxBytes, o.minBytes}) {
    Case c = makeCase(run, type, usesOp, op, root, bytes);
    const std::string what = describe(run, c, false) + " warm-up";
    for (int w = 0; w < o.warmupIters; ++w) PERF_CHECK(issueAndWait(t, c, false, what));
  }
  for (size_t bytes : sweepSizes(o)) {
    Case c = makeCase(run, type, usesOp, op, root, bytes);
    ResultRow row;
    row.bytes = std::max(c.counts.sendCount, c.counts.recvCount) * c.es;
    row.count = c.counts.paramCount;
    row.type = typeInfo(type).name;
    row.op = usesOp ? opName(op) : "none";
    row.root = root;
    printNow(t, rowPrefix(row.bytes, row.count, row.type.c_str(), row.op.c_str(), row.root));
    for (bool inPlace : {false, true}) {
      Measurement& m = inPlace ? row.inPlace : row.outOfPlace;
      if (inPlace && !o.inPlace) {
        m.ran = false;
        printNow(t, rowHalfNotRun());
        continue;
      }
      PERF_CHECK(measure(t, c, inPlace, &m));
      printNow(t, rowHalf(m.usec, m.algBw, m.busBw, m.wrong));
      t.busBwSum += m.busBw;
      t.busBwCount++;
      if (m.wrong && *m.wrong > 0) t.errors++;
    }
    printNow(t, "\n");
    if (t.printer) t.rows.push_back(row);
  }
  return Status::ok();
}

}  // namespace

// NCCL has no fp8 PreMulSum, so no fp8 avg or mulsum (it returns
// ncclInvalidArgument): `-o all` leaves those pairs out, as nccl-tests does;
// naming the op explicitly still runs it.
bool skippedByAll(const Options& o, ncclDataType_t type, OpKind op) {
  const bool fp8 = type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
  return o.opsAll && fp8 && (op == OpKind::kAvg || op == OpKind::kMulSum);
}

Status runBenchmarks(ThreadCtx& t) {
  const RunContext& run = t.run;
  const Options& o = run.opts;
  std::vector<int> roots;
  if (!run.test.usesRoot()) {
    roots.push_back(-1);
  } else if (o.root < 0) {
    for (int r = 0; r < run.nranks; ++r) roots.push_back(r);
  } else {
    roots.push_back(o.root);
  }
  const bool usesOp = run.test.usesOp();
  const std::vector<OpKind> ops = usesOp ? o.ops : std::vector<OpKind>{OpKind::kSum};
  for (int cycle = 0; o.runCycles == 0 || cycle < o.runCycles; ++cycle) {
    for (ncclDataType_t type : run.types)
      for (OpKind op : ops)
        if (!skippedByAll(o, type, op))
          for (int root : roots) PERF_CHECK(timeTest(t, type, usesOp, op, root));
  }
  return Status::ok();
}

}  // namespace theseus::perf
