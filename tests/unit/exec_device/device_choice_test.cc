// Which executor a communicator's device buffers get (exec/device/device_choice.cc): a pure function of
// THESEUS_DEVICE_EXECUTOR, the build and what every rank reported, so all ranks decide alike.
#include <gtest/gtest.h>

#include "exec/device/device_executor.h"

namespace theseus::exec {
namespace {

using S = DeviceExecutorSetting;
using M = DeviceExecutorMode;

TEST(DeviceExecutorChoice, AutoIsTheCudaExecutorOnlyWhenEveryRankUsesCuda) {
  DeviceExecutorChoice c = chooseDeviceExecutor(S::kAuto, true, {true, true, true});
  EXPECT_EQ(c.mode, M::kCuda);
  EXPECT_TRUE(c.whyNotCuda.empty());
  EXPECT_EQ(chooseDeviceExecutor(S::kAuto, true, {true}).mode, M::kCuda);

  c = chooseDeviceExecutor(S::kAuto, true, {true, true, false, false});
  EXPECT_EQ(c.mode, M::kOff);
  EXPECT_EQ(c.whyNotCuda, "rank 2 of the communicator does not use CUDA (THESEUS_DEVICE_EXECUTOR=auto)");
  EXPECT_EQ(chooseDeviceExecutor(S::kAuto, true, {false}).mode, M::kOff);

  c = chooseDeviceExecutor(S::kAuto, false, {true, true});
  EXPECT_EQ(c.mode, M::kOff);
  EXPECT_EQ(c.whyNotCuda, "this build of Theseus has no CUDA executor");
}

TEST(DeviceExecutorChoice, ExplicitSettingsWinOverWhatRanksReport) {
  EXPECT_EQ(chooseDeviceExecutor(S::kCuda, true, {true, false}).mode, M::kCuda);
  EXPECT_EQ(chooseDeviceExecutor(S::kCuda, false, {true}).mode, M::kOff) << "no CUDA executor to run";
  DeviceExecutorChoice off = chooseDeviceExecutor(S::kOff, true, {true, true});
  EXPECT_EQ(off.mode, M::kOff);
  EXPECT_EQ(off.whyNotCuda, "THESEUS_DEVICE_EXECUTOR=off");
  EXPECT_EQ(chooseDeviceExecutor(S::kEmulate, false, {false}).mode, M::kEmulate);
  EXPECT_EQ(chooseDeviceExecutor(S::kEmulate, true, {true}).mode, M::kEmulate);
}

TEST(DeviceExecutorChoice, TheModeSaysWhatTheDeviceExecutorRuns) {
  using K = device::MemoryKind;
  EXPECT_TRUE(deviceExecutorRuns(M::kCuda, K::kDevice));
  EXPECT_TRUE(deviceExecutorRuns(M::kCuda, K::kHostPinned)) << "kernels reach pinned host memory";
  EXPECT_FALSE(deviceExecutorRuns(M::kCuda, K::kHost));
  EXPECT_FALSE(deviceExecutorRuns(M::kOff, K::kDevice));
  EXPECT_TRUE(deviceExecutorRuns(M::kEmulate, K::kHost));
}

}  // namespace
}  // namespace theseus::exec
