// The Prometheus endpoint (THESEUS_METRICS_PORT) with real ranks: each rank runs allreduces,
// then scrapes its own endpoint (port + local rank) with Prometheus' own text parser
// (scrape_metrics.py, Debian's python3-prometheus-client) while its communicator is alive.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {
constexpr int kAllreduces = 25;
}  // namespace

// args: the base port.
THESEUS_RANK_FN(metrics_scrape) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(1 << 16, 1.0f);
  for (int i = 0; i < kAllreduces; ++i)
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr));
  const int port = std::stoi(ctx.args.at(0)) + ctx.rank;  // one host: local rank = rank
  const std::string cmd = std::string("/usr/bin/python3 ") + THESEUS_SCRAPE_SCRIPT + " " + std::to_string(port) + " " +
                          std::to_string(ctx.rank) + " " + std::to_string(ctx.nranks) + " " +
                          std::to_string(kAllreduces) + " 1>&2";
  const int rc = system(cmd.c_str());
  RANK_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Metrics, AScrapeParsesWithPrometheusOwnParser) {
  if (system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-prometheus-client is not installed (scripts/setup-deps.sh installs it)";
  SpawnOptions o;
  const int base = 20000 + static_cast<int>(getpid() % 20000);
  o.env["THESEUS_METRICS_PORT"] = std::to_string(base);
  o.args = {std::to_string(base)};
  auto r = runRanks("metrics_scrape", 3, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}
