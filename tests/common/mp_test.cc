#include "mp_test.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace theseus::test {
namespace {

std::map<std::string, RankFn>& registry() {
  static std::map<std::string, RankFn> r;
  return r;
}

std::string selfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

}  // namespace

Registrar::Registrar(const char* name, RankFn fn) { registry()[name] = fn; }

std::string encodeId(const ncclUniqueId& id) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : id.internal) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

bool decodeId(const std::string& hex, ncclUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v = 0;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

bool SpawnResult::allOk() const {
  if (timedOut) return false;
  for (int c : exitCodes)
    if (c != 0) return false;
  return !exitCodes.empty();
}

std::string SpawnResult::describe() const {
  std::ostringstream os;
  if (timedOut) os << "timed out after " << seconds << " s; ";
  for (size_t i = 0; i < exitCodes.size(); ++i) os << "rank " << ranks[i] << " exit " << exitCodes[i] << "; ";
  return os.str();
}

SpawnResult runRanks(const char* fnName, int nranks, const SpawnOptions& options) {
  SpawnResult result;
  ncclUniqueId id{};
  if (options.createUniqueId) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      ADD_FAILURE() << "ncclGetUniqueId failed: " << ncclGetErrorString(r) << " " << ncclGetLastError(nullptr);
      return result;
    }
  }
  std::vector<int> ranks = options.onlyRanks;
  if (ranks.empty())
    for (int r = 0; r < nranks; ++r) ranks.push_back(r);

  std::string exe = selfExe();
  static std::atomic<int> jobs{0};
  const int jobCounter = jobs.fetch_add(1);
  std::vector<pid_t> pids;
  auto start = std::chrono::steady_clock::now();
  for (int rank : ranks) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (auto& [k, v] : options.env) env.push_back(k + "=" + v);
    // Every runRanks call is one job (bootstrap/job_identity.h), as a launcher would make it.
    if (!options.env.count("THESEUS_JOB_ID") && getenv("THESEUS_JOB_ID") == nullptr)
      env.push_back("THESEUS_JOB_ID=test-" + std::to_string(getpid()) + "-" + std::to_string(jobCounter));
    env.push_back(std::string("THESEUS_TEST_RANK_FN=") + fnName);
    env.push_back("THESEUS_TEST_RANK=" + std::to_string(rank));
    env.push_back("THESEUS_TEST_NRANKS=" + std::to_string(nranks));
    env.push_back("THESEUS_TEST_ID=" + encodeId(id));
    std::string joined;
    for (size_t i = 0; i < options.args.size(); ++i) joined += (i ? "\x1f" : "") + options.args[i];
    env.push_back("THESEUS_TEST_ARGS=" + joined);

    std::vector<std::string> argv;
    if (options.prefix) argv = options.prefix(rank);
    // THESEUS_TEST_RANK_PREFIX: a command every rank runs under, words split at spaces, after the test's own
    // prefix (profiling a rank: "valgrind --tool=callgrind --toggle-collect=ncclAllReduce").
    if (const char* extra = getenv("THESEUS_TEST_RANK_PREFIX"))
      for (std::istringstream words(extra); words.good();)
        if (std::string w; words >> w) argv.push_back(w);
    argv.push_back(exe);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data());
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn failed: " << strerror(rc);
      pid = -1;
    }
    pids.push_back(pid);
  }

  result.ranks = ranks;
  result.exitCodes.assign(ranks.size(), -1);
  std::vector<bool> done(ranks.size(), false);
  size_t remaining = ranks.size();
  for (size_t i = 0; i < pids.size(); ++i)
    if (pids[i] < 0) done[i] = true, --remaining;
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        done[i] = true;
        --remaining;
        result.exitCodes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    if (remaining > 0 && elapsed > std::chrono::seconds(options.timeoutSec)) {
      result.timedOut = true;
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) waitpid(pids[i], nullptr, 0);
      break;
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

bool canUseNetns(std::string* whyNot) {
  if (geteuid() != 0) {
    *whyNot = "not root";
    return false;
  }
  if (system("command -v ip >/dev/null 2>&1") != 0) {
    *whyNot = "the 'ip' tool (iproute2) is missing";
    return false;
  }
  std::string name = "theseus-probe-" + std::to_string(getpid());
  std::string add = "ip netns add " + name + " >/dev/null 2>&1";
  if (system(add.c_str()) != 0) {
    *whyNot = "'ip netns add' failed (no CAP_SYS_ADMIN or no netns support)";
    return false;
  }
  std::string del = "ip netns del " + name + " >/dev/null 2>&1";
  (void)!system(del.c_str());
  return true;
}

}  // namespace theseus::test

// Runs a rank function when spawned as a rank, otherwise the GoogleTest suite.
int main(int argc, char** argv) {
  using namespace theseus::test;
  if (const char* fn = getenv("THESEUS_TEST_RANK_FN")) {
    auto it = registry().find(fn);
    if (it == registry().end()) {
      fprintf(stderr, "unknown rank function %s\n", fn);
      return 100;
    }
    RankContext ctx;
    ctx.rank = atoi(getenv("THESEUS_TEST_RANK"));
    // THESEUS_TEST_HOST_PER_RANK=1: every rank counts as a host of its own (NCCL_HOSTID), so ranks
    // of this machine talk through the network transports (and the device executor's FIFO proxy).
    if (const char* own = getenv("THESEUS_TEST_HOST_PER_RANK"); own != nullptr && strcmp(own, "1") == 0)
      setenv("NCCL_HOSTID", ("theseus-test-host-" + std::to_string(ctx.rank)).c_str(), 1);
    ctx.nranks = atoi(getenv("THESEUS_TEST_NRANKS"));
    decodeId(getenv("THESEUS_TEST_ID"), &ctx.id);
    std::string joined = getenv("THESEUS_TEST_ARGS") ? getenv("THESEUS_TEST_ARGS") : "";
    size_t pos = 0;
    while (!joined.empty() && pos <= joined.size()) {
      size_t sep = joined.find('\x1f', pos);
      ctx.args.push_back(joined.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos));
      if (sep == std::string::npos) break;
      pos = sep + 1;
    }
    int rc = it->second(ctx);
    fflush(stdout);
    fflush(stderr);
    return rc;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
