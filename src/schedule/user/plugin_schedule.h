// C schedule plugins (include/theseus/schedule_plugin.h).
//
// Loading (common/plugin_library.h). The descriptor symbols from the newest
// ABI version this Theseus knows to the oldest (today: v1 only; an older
// version would get an adapter here, NCCL-style). A library that exports only
// a newer symbol is reported as too new. The descriptor must
// have the exact struct_size and abi_version of its symbol, a valid name and
// non-NULL supports/generate; init() runs once.
//
// Generating. Calls into one plugin are serialised by a mutex. The program
// the plugin returns is copied field by field and every count and index is
// checked before it is used (ops, buffers, channels, step and dep counts,
// NULL arrays), so a buggy plugin gets a precise error instead of crashing
// the job; release() is called after every generate(). The copied program
// is then verified by the ProgramCache like every external program.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_library.h"
#include "common/status.h"
#include "schedule/user/user_schedules.h"
#include "theseus/schedule_plugin.h"

namespace theseus::schedule::user {

class PluginSchedule final : public UserSchedule {
 public:
  ~PluginSchedule() override;  // finalize(), then the library closes
  PluginSchedule(const PluginSchedule&) = delete;
  PluginSchedule& operator=(const PluginSchedule&) = delete;

  bool supports(Collective c, int nranks) const override;
  Result<Program> generate(const GenerateRequest& req) const override;

 private:
  PluginSchedule() = default;
  friend Result<std::shared_ptr<PluginSchedule>> loadSchedulePlugin(const std::string& path);
  std::string label() const;  // "schedule plugin 'x' (/path/libx.so)"

  std::unique_ptr<plugin::Library> library_;
  const theseusSchedulePlugin_v1_t* plugin_ = nullptr;
  void* context_ = nullptr;
  mutable std::mutex mu_;
};

Result<std::shared_ptr<PluginSchedule>> loadSchedulePlugin(const std::string& path);

}  // namespace theseus::schedule::user
