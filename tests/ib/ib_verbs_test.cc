// The IB network's pieces in one process against the libibverbs test double: discovery, the
// registration cache, and set-up calls given garbage (a handle is bytes from another process).
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_net.h"

using namespace theseus::transport::ib;

namespace {

class DoubleEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/theseus-ibv-unit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("NCCL_IBVERBS_LIB", THESEUS_FAKE_IBVERBS, 1);
    setenv("THESEUS_FAKE_IBV_DIR", dir_.c_str(), 1);
    setenv("THESEUS_FAKE_IBV_DEVICES", "mlx5_0:ports=2,mlx5_1,roce0:link=eth", 1);
    setenv("NCCL_IB_HCA", "^mlx5_0:2", 1);
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

 private:
  std::string dir_;
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new DoubleEnvironment);

}  // namespace

TEST(IbDevices, DiscoveryHonoursNcclIbHcaAndTheLinkLayer) {
  const IbDevices& d = IbDevices::get();
  ASSERT_EQ(d.devices().size(), 3u) << d.why();
  EXPECT_EQ(d.devices()[0]->describe().substr(0, 13), "mlx5_0:1 (IB,");
  EXPECT_EQ(d.devices()[1]->name, "mlx5_1");
  EXPECT_FALSE(d.devices()[1]->roce);
  EXPECT_TRUE(d.devices()[2]->roce);
  EXPECT_EQ(d.devices()[2]->gidIndex, 3) << "RoCE v2, IPv4-mapped";
  for (const IbDevice* dev : d.devices()) EXPECT_EQ(dev->port, 1) << dev->name << ": '^mlx5_0:2' leaves port 2 out";
  EXPECT_NE(d.devices()[0]->lid, d.devices()[1]->lid);
  int n = 0;
  ASSERT_EQ(ibNet()->devices(&n), ncclSuccess);
  EXPECT_EQ(n, 3);
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(ibNet()->getProperties(2, &props), ncclSuccess);
  EXPECT_STREQ(props.name, "roce0");
  // The double's provider takes dma-bufs (its probe answers EBADF, not EOPNOTSUPP); no nvidia-peermem here.
  EXPECT_EQ(props.ptrSupport & ~NCCL_PTR_CUDA, NCCL_PTR_HOST | NCCL_PTR_DMABUF);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_EQ(ibNet()->getProperties(3, &props), ncclInvalidArgument);
}

TEST(IbMrCache, OneRegistrationServesEveryRangeInsideIt) {
  const IbDevices& d = IbDevices::get();
  ASSERT_FALSE(d.devices().empty()) << d.why();
  MrCache* cache = d.devices()[0]->mrs;
  const auto before = cache->stats();
  std::vector<char> buf(1 << 20);
  auto a = cache->acquire(buf.data(), buf.size());
  ASSERT_TRUE(a.isOk()) << a.status().message();
  auto b = cache->acquire(buf.data() + 4096, 8192);  // inside: the same MR
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a.value(), b.value());
  auto s = cache->stats();
  EXPECT_EQ(s.registrations - before.registrations, 1u);
  EXPECT_EQ(s.hits - before.hits, 1u);
  EXPECT_EQ(s.live, before.live + 1);
  cache->release(b.value());
  EXPECT_EQ(cache->stats().live, before.live + 1) << "still referenced";
  cache->release(a.value());
  EXPECT_EQ(cache->stats().live, before.live) << "the last release deregisters";
}

// dma-buf registrations (GPUDirect RDMA): registered exactly, shared only by the same range, never
// by a host registration that covers the same addresses; a bad descriptor is a clear error.
TEST(IbMrCache, DmaBufRegistrationsAreTheirOwn) {
  MrCache* cache = IbDevices::get().devices().at(0)->mrs;
  const auto before = cache->stats();
  const size_t bytes = 64 << 10;
  const int fd = memfd_create("dmabuf-stand-in", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 2 * bytes), 0);
  std::vector<char> host(bytes);
  char* iova = host.data();  // the address work requests name
  auto a = cache->acquireDmaBuf(iova, bytes, fd, bytes);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  auto b = cache->acquireDmaBuf(iova, bytes, fd, bytes);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a.value(), b.value());
  auto h = cache->acquire(iova, 4096);  // host memory at the same address: an MR of its own
  ASSERT_TRUE(h.isOk());
  EXPECT_NE(h.value(), a.value());
  EXPECT_EQ(cache->stats().registrations - before.registrations, 2u);
  for (ibv_mr* mr : {a.value(), b.value(), h.value()}) cache->release(mr);
  EXPECT_EQ(cache->stats().live, before.live);
  auto bad = cache->acquireDmaBuf(iova, bytes, fd, 2 * bytes);  // past the descriptor's end
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("ibv_reg_dmabuf_mr of 65536 bytes of device memory"), std::string::npos)
      << bad.status().message();
  close(fd);
}

TEST(IbMrCache, AFailedRegistrationIsAClearError) {
  MrCache* cache = IbDevices::get().devices().at(0)->mrs;
  void* none = reinterpret_cast<void*>(uintptr_t{1} << 46);  // nothing is mapped there
  auto r = cache->acquire(none, 4096);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("IB: ibv_reg_mr of 4096 bytes"), std::string::npos) << r.status().message();
}

TEST(IbNet, ConnectRefusesAHandleThatIsNotOne) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0xab, sizeof(handle));  // garbage, with a "pointer" where the set-up state would be
  void* comm = nullptr;
  EXPECT_EQ(ibNet()->connect(nullptr, 0, handle, &comm, nullptr), ncclRemoteError);
  EXPECT_EQ(comm, nullptr);
  // A real handle whose state pointer was overwritten: the pointer is not followed.
  void* listen = nullptr;
  ASSERT_EQ(ibNet()->listen(nullptr, 0, handle, &listen), ncclSuccess);
  reinterpret_cast<wire::Handle*>(handle)->connecting = reinterpret_cast<void*>(0xdeadbeef);
  for (int i = 0; i < 1000 && comm == nullptr; ++i) {
    ASSERT_EQ(ibNet()->connect(nullptr, 0, handle, &comm, nullptr), ncclSuccess);
    void* recv = nullptr;
    ASSERT_EQ(ibNet()->accept(listen, &recv, nullptr), ncclSuccess);
    if (recv != nullptr) ibNet()->closeRecv(recv);
    usleep(1000);
  }
  ASSERT_NE(comm, nullptr) << "connect with a fresh set-up state";
  ibNet()->closeSend(comm);
  ibNet()->closeListen(listen);
}

TEST(IbNet, ABadIrecvCountIsRefused) {
  void* data[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  int tags[2] = {0, 0};
  void* mh[2] = {nullptr, nullptr};
  void* request = nullptr;
  EXPECT_EQ(ibNet()->irecv(reinterpret_cast<void*>(1), 2, data, sizes, tags, mh, nullptr, &request),
            ncclInternalError);
  EXPECT_NE(std::string(ibLastError()).find("irecv of 2 buffers"), std::string::npos) << ibLastError();
}
