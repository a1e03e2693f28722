// mpi_coll_perf: OpenMPI's collectives measured and checked exactly like the
// *_perf binaries measure NCCL's, for side-by-side numbers (scripts/bench.sh).
//
//   mpirun -np 4 mpi_coll_perf all_reduce -b 8 -e 64M -f 2 -c 1
//
// It shares the collective definitions (counts, busbw factors, expected
// results: collectives/*_perf.cc), the data checker and the table format with
// the NCCL harness, and accepts the same flags minus those that only make sense
// for NCCL (-t/-g > 1, -R, -x, --host, --malloc). One rank per process, host
// memory, MPI_COMM_WORLD.
//
// MPI has no avg or pre-multiplied sum: avg on integers is MPI_SUM followed by
// a division, avg on floats and mulsum scale the input into a scratch buffer
// first (as NCCL does), inside the timed region. MPI has no half, bfloat16 or
// fp8 type: those are rejected. In-place reduce_scatter uses MPI_IN_PLACE
// (result at the start of the buffer) and moves the block to the rank's offset
// where NCCL's in-place layout expects it.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "perf_coll.h"
#include "perf_options.h"
#include "perf_report.h"
#include "perf_team.h"
#include "perf_verify.h"

namespace theseus::perf {
namespace {

MPI_Datatype mpiType(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(OpKind op) {
  switch (op) {
    case OpKind::kProd: return MPI_PROD;
    case OpKind::kMax: return MPI_MAX;
    case OpKind::kMin: return MPI_MIN;
    default: return MPI_SUM;  // sum, and the emulated avg / mulsum
  }
}

struct Ctx {
  const Options* o = nullptr;
  const CollectiveTest* test = nullptr;
  std::string coll;  // "all_reduce"
  int rank = 0;
  int nranks = 1;
  std::vector<char> send, recv, scaled;
};

struct Case {
  ncclDataType_t type;
  size_t es;
  bool usesOp;
  OpKind op;
  int root;
  CollCounts k;
};

// Multiplies n elements of `src` by `s` into `dst` in the element type (floats)
// or integer arithmetic (mulsum scalars are 1 or 2).
void scale(ncclDataType_t t, const void* src, void* dst, size_t n, double s) {
  const TypeInfo& ti = typeInfo(t);
  for (size_t i = 0; i < n; ++i) {
    uint64_t b = loadBits(src, i, ti.size);
    if (t == ncclFloat32) {
      float f;
      uint32_t u = static_cast<uint32_t>(b);
      memcpy(&f, &u, 4);
      f = f * static_cast<float>(s);
      memcpy(&u, &f, 4);
      b = u;
    } else if (t == ncclFloat64) {
      double d;
      memcpy(&d, &b, 8);
      d *= s;
      memcpy(&b, &d, 8);
    } else {
      b *= static_cast<uint64_t>(s);
    }
    storeBits(dst, i, ti.size, b);
  }
}

void divideInts(ncclDataType_t t, void* buf, size_t n, int by) {
  const TypeInfo& ti = typeInfo(t);
  const int bits = static_cast<int>(ti.size * 8);
  for (size_t i = 0; i < n; ++i) {
    uint64_t b = loadBits(buf, i, ti.size);
    if (ti.isSigned) {
      int64_t v = bits == 64 ? static_cast<int64_t>(b) : static_cast<int64_t>(b << (64 - bits)) >> (64 - bits);
      b = static_cast<uint64_t>(v / by);
    } else {
      b /= static_cast<uint64_t>(by);
    }
    storeBits(buf, i, ti.size, b);
  }
}

int runColl(Ctx& c, const Case& cs, bool inPlace) {
  const size_t ua = c.o->unalign * cs.es;
  char* rb = c.recv.data() + ua;
  char* sb = inPlace ? rb + cs.k.sendInplaceOffset * c.rank * cs.es : c.send.data() + ua;
  char* out = inPlace ? rb + cs.k.recvInplaceOffset * c.rank * cs.es : rb;
  const int n = static_cast<int>(cs.k.paramCount);
  const MPI_Datatype t = mpiType(cs.type);
  const bool emulateScale = cs.usesOp && ((cs.op == OpKind::kAvg && typeInfo(cs.type).isFloat) || cs.op == OpKind::kMulSum);
  const void* in = sb;
  if (emulateScale) {
    double s = cs.op == OpKind::kAvg ? 1.0 / c.nranks : 1 + (c.rank & 1);
    scale(cs.type, sb, c.scaled.data(), cs.k.sendCount, s);
    in = c.scaled.data();
  }
  const bool inPlaceArg = inPlace && !emulateScale;
  const void* sendArg = inPlaceArg ? MPI_IN_PLACE : in;
  int rc = MPI_SUCCESS;
  const std::string& k = c.coll;
  if (k == "all_reduce") {
    rc = MPI_Allreduce(sendArg, out, n, t, mpiOp(cs.op), MPI_COMM_WORLD);
  } else if (k == "reduce") {
    const void* s = (inPlaceArg && c.rank == cs.root) ? MPI_IN_PLACE : in;
    rc = MPI_Reduce(s, out, n, t, mpiOp(cs.op), cs.root, MPI_COMM_WORLD);
  } else if (k == "reduce_scatter") {
    char* dst = inPlaceArg ? rb : out;
    rc = MPI_Reduce_scatter_block(inPlaceArg ? MPI_IN_PLACE : in, dst, n, t, mpiOp(cs.op), MPI_COMM_WORLD);
    if (inPlaceArg && dst != out) memmove(out, dst, n * cs.es);
  } else if (k == "all_gather") {
    rc = MPI_Allgather(inPlace ? MPI_IN_PLACE : sb, n, t, out, n, t, MPI_COMM_WORLD);
  } else if (k == "alltoall") {
    rc = MPI_Alltoall(inPlace ? MPI_IN_PLACE : sb, n, t, out, n, t, MPI_COMM_WORLD);
  } else if (k == "gather") {
    const void* s = (inPlace && c.rank == cs.root) ? MPI_IN_PLACE : sb;
    rc = MPI_Gather(s, n, t, out, n, t, cs.root, MPI_COMM_WORLD);
  } else if (k == "scatter") {
    void* r = (inPlace && c.rank == cs.root) ? MPI_IN_PLACE : out;
    rc = MPI_Scatter(sb, n, t, r, n, t, cs.root, MPI_COMM_WORLD);
  } else if (k == "broadcast") {
    if (!inPlace && c.rank == cs.root) memcpy(out, sb, n * cs.es);
    rc = MPI_Bcast(out, n, t, cs.root, MPI_COMM_WORLD);
  }
  if (rc == MPI_SUCCESS && cs.usesOp && cs.op == OpKind::kAvg && !typeInfo(cs.type).isFloat &&
      c.test->hasOutput(c.rank, cs.root))
    divideInts(cs.type, out, cs.k.recvCount, c.nranks);
  return rc;
}

// One -c iteration: inputs, poison, the call, the comparison; returns the
// number of wrong elements summed over ranks.
double checkOnce(Ctx& c, const Case& cs, bool inPlace, uint64_t seed) {
  InputModel model(cs.type, cs.usesOp ? cs.op : OpKind::kMax, c.nranks, seed);
  const size_t ua = c.o->unalign * cs.es;
  const size_t sendOff = ua + (inPlace ? cs.k.sendInplaceOffset * c.rank * cs.es : 0);
  const size_t recvOff = ua + (inPlace ? cs.k.recvInplaceOffset * c.rank * cs.es : 0);
  std::vector<char> expected;
  const bool has = c.test->hasOutput(c.rank, cs.root);
  if (has) {
    expected.resize(cs.k.recvCount * cs.es);
    c.test->expected(model, c.rank, cs.root, cs.k, expected.data());
    fillPoison(cs.es, expected.data(), cs.k.recvCount, c.recv.data() + recvOff);
  }
  model.fillInput(c.rank, 0, cs.k.sendCount, (inPlace ? c.recv.data() : c.send.data()) + sendOff);
  double wrong = -1;
  if (runColl(c, cs, inPlace) == MPI_SUCCESS) {
    size_t first = SIZE_MAX;
    wrong = has ? static_cast<double>(countMismatches(cs.type, c.recv.data() + recvOff, expected.data(),
                                                      cs.k.recvCount, model.toleranceUlps(), &first))
                : 0;
    if (wrong > 0)
      fprintf(stderr, "mpi_coll_perf: rank %d: %s %s %s: %.0f wrong element(s), first at %zu\n", c.rank, c.coll.c_str(),
              inPlace ? "in-place" : "out-of-place", typeInfo(cs.type).name, wrong, first);
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

Measurement measure(Ctx& c, const Case& cs, bool inPlace, uint64_t* rep) {
  const Options& o = *c.o;
  runColl(c, cs, inPlace);
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t start = monotonicNs();
  for (int i = 0; i < o.iters; ++i) {
    runColl(c, cs, inPlace);
    if (o.blocking == 1 || o.blocking == 3) MPI_Barrier(MPI_COMM_WORLD);
  }
  double sec = o.iters > 0 ? (monotonicNs() - start) / 1e9 / o.iters : 0;
  if (o.average != 0) {
    MPI_Op op = o.average == 2 ? MPI_MIN : o.average == 3 ? MPI_MAX : MPI_SUM;
    MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    if (o.average == 1) sec /= c.nranks;
  }
  Measurement m;
  m.usec = sec * 1e6;
  if (sec > 0) c.test->bandwidth(cs.k.paramCount, cs.es, sec, c.nranks, &m.algBw, &m.busBw);
  if (o.check > 0) {
    double wrong = 0;
    for (int i = 0; i < o.check && wrong == 0; ++i) wrong = checkOnce(c, cs, inPlace, ++*rep);
    m.wrong = wrong < 0 ? 1 : wrong;
  }
  return m;
}

Status checkSupported(Options& o, const std::string& coll) {
  if (o.types == allTypes()) {  // -d all: the types MPI has
    std::vector<ncclDataType_t> mpiTypes;
    for (ncclDataType_t t : o.types)
      if (mpiType(t) != MPI_DATATYPE_NULL) mpiTypes.push_back(t);
    o.types = mpiTypes;
  }
  if (o.nThreads != 1 || o.nGpus != 1) return usageError("-t and -g must be 1 (one rank per MPI process)");
  if (o.localRegister != 0 || o.ctaPolicy >= 0) return usageError("-R and -x are NCCL-only options");
  if (o.aggIters != 1) return usageError("-m (aggregation in NCCL groups) has no MPI equivalent");
  for (ncclDataType_t t : o.types)
    if (mpiType(t) == MPI_DATATYPE_NULL)
      return usageError("datatype %s has no MPI equivalent (use int8..uint64, float, double)", typeInfo(t).name);
  if (coll.empty()) return usageError("no collective given");
  return Status::ok();
}

// Parses "<collective> [flags]" and sizes the buffers.
Status setup(int argc, char** argv, Options* o, Ctx* c) {
  std::string coll = argc > 1 ? argv[1] : "";
  if (coll.size() > 5 && coll.substr(coll.size() - 5) == "_perf") coll.resize(coll.size() - 5);
  static const char* const kSupported[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                           "reduce",     "alltoall",   "gather",         "scatter"};
  bool known = std::find_if(std::begin(kSupported), std::end(kSupported),
                            [&](const char* s) { return coll == s; }) != std::end(kSupported);
  if (!known)
    return usageError("usage: mpi_coll_perf <all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|gather|"
                      "scatter> [nccl-tests options]");
  PERF_CHECK(parseOptions(argc - 1, argv + 1, o));
  if (o->help) return Status::ok();
  PERF_CHECK(checkSupported(*o, coll));
  c->test = findCollective((coll + "_perf").c_str());
  if (c->test->usesRoot() && o->root >= c->nranks) return usageError("-r %d: root must be < %d", o->root, c->nranks);
  c->o = o;
  c->coll = coll;
  size_t bytes = 0;
  for (ncclDataType_t t : o->types) {
    size_t es = typeInfo(t).size;
    CollCounts k = c->test->counts(o->maxBytes / es, es, c->nranks);
    bytes = std::max(bytes, std::max(k.sendCount, k.recvCount) * es + o->unalign * es);
  }
  c->send.assign(bytes, 0);
  c->recv.assign(bytes, 0);
  c->scaled.assign(bytes, 0);
  return Status::ok();
}

void printHeader(const Ctx& c) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  std::string v(version, strnlen(version, sizeof(version)));
  v = v.substr(0, v.find_first_of(",\n"));
  printf("# mpi_coll_perf (%s), nccl-tests table format\n# Collective test starting: mpi_coll_perf %s\n", v.c_str(),
         c.coll.c_str());
  printf("# nProcs %d minBytes %zu maxBytes %zu iters: %d warmup iters: %d validation: %d\n#\n", c.nranks,
         c.o->minBytes, c.o->maxBytes, c.o->iters, c.o->warmupIters, c.o->check);
  for (const std::string& h : tableHeader()) printf("%s\n", h.c_str());
  fflush(stdout);
}

struct Totals {
  long long errors = 0;
  double bwSum = 0;
  int bwCount = 0;
};

// One (type, op, root): warm-up at the largest and smallest size, then the sweep.
void timeTest(Ctx& c, ncclDataType_t t, OpKind op, int root, uint64_t* rep, Totals* totals) {
  const Options& o = *c.o;
  const size_t es = typeInfo(t).size;
  const int r = root < 0 ? 0 : root;
  for (size_t warm : {o.maxBytes, o.minBytes}) {
    Case w{t, es, c.test->usesOp(), op, r, c.test->counts(warm / es, es, c.nranks)};
    for (int i = 0; i < o.warmupIters; ++i) runColl(c, w, false);
  }
  for (size_t size : sweepSizes(o)) {
    Case cs{t, es, c.test->usesOp(), op, r, c.test->counts(size / es, es, c.nranks)};
    Measurement oop = measure(c, cs, false, rep);
    Measurement ip = measure(c, cs, true, rep);
    if (c.rank == 0) {
      printf("%s%s%s\n",
             rowPrefix(std::max(cs.k.sendCount, cs.k.recvCount) * es, cs.k.paramCount, typeInfo(t).name,
                       c.test->usesOp() ? opName(op) : "none", root)
                 .c_str(),
             rowHalf(oop.usec, oop.algBw, oop.busBw, oop.wrong).c_str(),
             rowHalf(ip.usec, ip.algBw, ip.busBw, ip.wrong).c_str());
      fflush(stdout);
    }
    for (const Measurement* m : {&oop, &ip}) {
      totals->bwSum += m->busBw;
      totals->bwCount++;
      if (m->wrong && *m->wrong > 0) totals->errors++;
    }
  }
}

int realMain(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Ctx c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.nranks);
  Options o;
  Status s = setup(argc, argv, &o, &c);
  if (s.isOk() && o.help) {
    if (c.rank == 0) fputs(usageText("mpi_coll_perf <collective>").c_str(), stdout);
    MPI_Finalize();
    return kExitOk;
  }
  if (!s.isOk()) {
    if (c.rank == 0) fprintf(stderr, "mpi_coll_perf: %s\n", s.message().c_str());
    MPI_Finalize();
    return s.exitCode();
  }
  if (c.rank == 0) printHeader(c);
  std::vector<int> roots;
  if (!c.test->usesRoot()) {
    roots = {-1};
  } else if (o.root < 0) {
    for (int r = 0; r < c.nranks; ++r) roots.push_back(r);
  } else {
    roots = {o.root};
  }
  const std::vector<OpKind> ops = c.test->usesOp() ? o.ops : std::vector<OpKind>{OpKind::kSum};
  uint64_t rep = 0;
  Totals totals;
  for (int cycle = 0; o.runCycles == 0 || cycle < o.runCycles; ++cycle)
    for (ncclDataType_t t : o.types)
      for (OpKind op : ops)
        for (int root : roots) timeTest(c, t, op, root, &rep, &totals);
  if (c.rank == 0) {
    for (const std::string& line : footer(totals.errors, totals.bwCount ? totals.bwSum / totals.bwCount : 0, -1))
      printf("%s\n", line.c_str());
    printf("#\n# Collective test concluded: mpi_coll_perf %s\n", c.coll.c_str());
    fflush(stdout);
  }
  MPI_Finalize();
  return totals.errors > 0 ? kExitWrongResults : kExitOk;
}

}  // namespace
}  // namespace theseus::perf

int main(int argc, char** argv) { return theseus::perf::realMain(argc, argv); }
