// Tests of the libibverbs test double (README.md). Every test runs its
// scenario (ib_double_scenarios.cc) in fresh processes spawned from this binary
// (--ib-double-child <scenario> <role>), because the double reads its
// configuration once per process and moves data between processes. The
// processes of one test share a new THESEUS_FAKE_IBV_DIR; by default role A is
// on host "hostA" and role B on host "hostB".
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ib_double_scenarios.h"

extern char** environ;

namespace theseus::ibdouble {
namespace {

using Env = std::map<std::string, std::string>;

struct Child {
  pid_t pid = -1;
  std::string role;
};

// One test's processes and their shared directory.
class ProcessGroup {
 public:
  ProcessGroup() {
    char dir[] = "/tmp/ibd-XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
  }
  ~ProcessGroup() {
    for (Child& c : children_) {
      if (c.pid > 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
      }
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }

  void spawn(const std::string& scenario, const std::string& role, const Env& extra = {}) {
    Env env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || kv.rfind("THESEUS_FAKE_IBV_", 0) == 0 || kv.rfind("IBD_", 0) == 0) continue;
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["THESEUS_FAKE_IBV_DIR"] = dir_;
    env["THESEUS_FAKE_IBV_HOST"] = "host" + role;
    for (const auto& [k, v] : extra) {
      if (v == "<unset>") {
        env.erase(k);
      } else {
        env[k] = v;
      }
    }
    std::vector<std::string> strings;
    for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", flag = "--ib-double-child", name = scenario, r = role;
    char* argv[] = {exe.data(), flag.data(), name.data(), r.data(), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
    children_.push_back(Child{pid, role});
  }

  // Waits for the child of this role; its exit status (-1 after timeoutMs: killed).
  int wait(const std::string& role, int timeoutMs = 60000) {
    for (Child& c : children_) {
      if (c.role != role || c.pid <= 0) continue;
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
      int status = 0;
      while (waitpid(c.pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &status, 0);
          c.pid = -1;
          ADD_FAILURE() << "role " << role << " timed out";
          return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      c.pid = -1;
      if (WIFSIGNALED(status)) {
        ADD_FAILURE() << "role " << role << " died of signal " << WTERMSIG(status);
        return -1;
      }
      return WEXITSTATUS(status);
    }
    ADD_FAILURE() << "no running child of role " << role;
    return -1;
  }

  void publish(const std::string& key) { std::ofstream(dir_ + "/b-" + key) << "1"; }

 private:
  std::string dir_;
  std::vector<Child> children_;
};

// Runs scenario with one process per entry of roles (role -> extra environment) and expects all to pass.
void runAll(const std::string& scenario, const std::map<std::string, Env>& roles) {
  ProcessGroup run;
  ASSERT_FALSE(run.dir().empty());
  for (const auto& [role, env] : roles) run.spawn(scenario, role, env);
  for (const auto& [role, env] : roles) EXPECT_EQ(run.wait(role), 0) << scenario << " role " << role;
}

void runPair(const std::string& scenario, const Env& both = {}, const Env& onlyA = {}, const Env& onlyB = {}) {
  Env a = both, b = both;
  a.insert(onlyA.begin(), onlyA.end());
  b.insert(onlyB.begin(), onlyB.end());
  runAll(scenario, {{"A", a}, {"B", b}});
}

void runSingle(const std::string& scenario, const Env& env = {}) { runAll(scenario, {{"A", env}}); }

TEST(IbDoubleApi, DevicesPortsAndGids) {
  runSingle("api_devices", {{"THESEUS_FAKE_IBV_DEVICES", "fa:ports=2:link=eth:speed=100000:mtu=2048,fb"}});
}

TEST(IbDoubleApi, DefaultIsOneIbDevice) { runSingle("api_default_devices", {{"THESEUS_FAKE_IBV_DEVICES", "<unset>"}}); }

TEST(IbDoubleApi, EmptyListMeansNoDevices) { runSingle("api_no_devices", {{"THESEUS_FAKE_IBV_DEVICES", ""}}); }

TEST(IbDoubleApi, HostsHaveTheirOwnGuidLidAndGid) {
  runAll("api_identity", {{"A", {{"THESEUS_FAKE_IBV_HOST", "h1"}}},
                          {"B", {{"THESEUS_FAKE_IBV_HOST", "h2"}}},
                          {"C", {{"THESEUS_FAKE_IBV_HOST", "h1"}}}});
}

TEST(IbDoubleApi, ModifyQpFollowsTheDriversMaskRules) {
  runSingle("api_modify_qp", {{"THESEUS_FAKE_IBV_DEVICES", "ib0,roce0:link=eth"}});
}

TEST(IbDoubleApi, ResourceErrors) { runSingle("api_resource_errors"); }

TEST(IbDoubleApi, RegMrFault) { runSingle("api_reg_mr_fault", {{"THESEUS_FAKE_IBV_FAULT", "reg_mr_fail"}}); }

TEST(IbDoubleApi, CompletionChannelBlocksUntilACompletion) { runSingle("api_completion_channel"); }

TEST(IbDoubleApi, GarbageAndTruncatedFramesAreErrorsNotCrashes) { runSingle("api_garbage_frames"); }

TEST(IbDoubleApi, ExportsTheVerbsSymbolsUnderTheRealName) {
  void* h = dlopen(FAKE_IBVERBS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(std::filesystem::path(FAKE_IBVERBS_LIBRARY).filename(), "libibverbs.so.1");
  for (const char* name :
       {"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name", "ibv_get_device_guid",
        "ibv_open_device", "ibv_close_device", "ibv_query_device", "ibv_query_port", "ibv_query_gid",
        "_ibv_query_gid_ex", "ibv_query_pkey", "ibv_alloc_pd", "ibv_dealloc_pd", "ibv_reg_mr", "ibv_reg_mr_iova2",
        "ibv_reg_dmabuf_mr",
        "ibv_dereg_mr", "ibv_create_cq", "ibv_destroy_cq", "ibv_create_comp_channel", "ibv_destroy_comp_channel",
        "ibv_get_cq_event", "ibv_ack_cq_events", "ibv_create_qp", "ibv_modify_qp", "ibv_query_qp", "ibv_destroy_qp",
        "ibv_get_async_event", "ibv_ack_async_event", "ibv_wc_status_str", "ibv_event_type_str", "ibv_fork_init"})
    EXPECT_NE(dlsym(h, name), nullptr) << name;
  Dl_info info{};
  ASSERT_NE(dladdr(dlsym(h, "ibv_open_device"), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("tests/ib_double/lib"), std::string::npos) << info.dli_fname;
  dlclose(h);
}

TEST(IbDoubleData, RdmaWriteWithImmediate) { runPair("write_imm"); }

TEST(IbDoubleData, RdmaWriteWithImmediateOnOneHost) {
  runPair("write_imm", {{"THESEUS_FAKE_IBV_HOST", "same"}, {"IBD_VARIANT", "same_host"}});
}

TEST(IbDoubleData, RdmaWriteWithImmediateOnTheSecondPort) {
  runPair("write_imm", {{"THESEUS_FAKE_IBV_DEVICES", "fake_mlx5_0:ports=2"}, {"IBD_PORT", "2"}});
}

TEST(IbDoubleData, RdmaWriteWithImmediateOverRoce) {
  runPair("write_imm", {{"THESEUS_FAKE_IBV_DEVICES", "fake_roce0:link=eth"}});
}

TEST(IbDoubleData, RdmaWriteWithImmediateAddressedByGid) { runPair("write_imm", {{"IBD_VARIANT", "gid"}}); }

TEST(IbDoubleData, SendRecvScatterAndTooLong) { runPair("send_recv"); }

TEST(IbDoubleData, InlineDataIsTakenAtPostTime) { runPair("inline"); }

TEST(IbDoubleData, RdmaRead) { runPair("read"); }

TEST(IbDoubleData, BothDirectionsAtOnceWithPostAndPollOnTwoThreads) { runPair("bidirectional"); }

TEST(IbDoubleErrors, RemoteAccessErrors) {
  for (const char* v : {"no_remote_write", "out_of_range", "deregistered", "read_no_remote_read"}) {
    SCOPED_TRACE(v);
    runPair("access_error", {{"IBD_VARIANT", v}});
  }
}

TEST(IbDoubleErrors, RemAccessFault) {
  runPair("access_error", {{"IBD_VARIANT", "fault"}}, {{"THESEUS_FAKE_IBV_FAULT", "rem_access_after=2"}});
}

TEST(IbDoubleErrors, ErrorStateFlushesEveryWr) { runSingle("flush_on_error"); }

TEST(IbDoubleErrors, QpErrorFault) { runPair("qp_error_fault", {}, {{"THESEUS_FAKE_IBV_FAULT", "qp_error_after=2"}}); }

TEST(IbDoubleErrors, PortDownAndUpThroughTheFile) { runPair("port_down_up"); }

TEST(IbDoubleErrors, PortDownAndUpOverRoce) {
  runPair("port_down_up", {{"THESEUS_FAKE_IBV_DEVICES", "fake_roce0:link=eth"}, {"IBD_DEVICE", "fake_roce0"}});
}

TEST(IbDoubleErrors, DeadPeerIsARetryError) {
  ProcessGroup run;
  run.spawn("peer_death", "A");
  run.spawn("peer_death", "B");
  EXPECT_EQ(run.wait("B"), 0);
  run.publish("exited.B");
  EXPECT_EQ(run.wait("A"), 0);
}

TEST(IbDoubleErrors, PeerDyingWithAWrInFlight) { runPair("peer_death", {{"IBD_VARIANT", "in_flight"}}); }

TEST(IbDoubleErrors, RnrWaitsForTheReceive) { runPair("rnr"); }

TEST(IbDoubleErrors, RnrRetryExceeded) { runPair("rnr", {{"IBD_VARIANT", "exceeded"}}); }

TEST(IbDoubleErrors, CqOverrun) { runPair("cq_overrun"); }

TEST(IbDoubleErrors, CqOverrunFault) {
  runPair("cq_overrun", {{"IBD_VARIANT", "fault"}}, {}, {{"THESEUS_FAKE_IBV_FAULT", "cq_overrun_after=2"}});
}

}  // namespace
}  // namespace theseus::ibdouble

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--ib-double-child") == 0) {
    theseus::ibdouble::ScenarioFn fn = theseus::ibdouble::findScenario(argv[2]);
    if (fn == nullptr) {
      fprintf(stderr, "no scenario %s\n", argv[2]);
      return 2;
    }
    fn(argv[3]);
    return 0;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
