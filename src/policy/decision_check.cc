#include "policy/decision_check.h"

#include <mutex>
#include <unordered_map>

#include "schedule/user/user_schedules.h"

namespace theseus::policy {
namespace {

constexpr size_t kMaxRemembered = 4096;

Status builtinAccepts(const std::string& name, schedule::Collective c, int nranks,
                      const schedule::ScheduleParams& params) {
  schedule::GenerateRequest req;
  req.collective = c;
  req.nranks = nranks;
  req.params = params;
  req.onlyRank = 0;
  auto program = schedule::generateBuiltin(name, req);
  return program.isOk() ? Status::ok() : program.status();
}

}  // namespace

bool scheduleServes(const std::string& name, schedule::Collective c, int nranks) {
  if (schedule::isBuiltin(name)) return schedule::builtinSupports(name, c, nranks);
  return schedule::user::supports(name, c, nranks);
}

bool scheduleServesRequest(const std::string& name, const schedule::GenerateRequest& req) {
  if (schedule::isBuiltin(name)) return schedule::builtinSupports(name, req.collective, req.nranks);
  return schedule::user::serves(name, req);
}

bool paramsUsable(const std::string& name, schedule::Collective c, int nranks, const schedule::ScheduleParams& params) {
  if (!schedule::isBuiltin(name)) return true;
  static std::mutex mu;
  static std::unordered_map<std::string, bool> remembered;
  const std::string key = name + "|" + std::to_string(static_cast<int>(c)) + "|" + std::to_string(nranks) + "|" +
                          params.toString();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = remembered.find(key);
    if (it != remembered.end()) return it->second;
  }
  bool ok = builtinAccepts(name, c, nranks, params).isOk();
  std::lock_guard<std::mutex> lock(mu);
  if (remembered.size() >= kMaxRemembered) remembered.clear();
  remembered.emplace(key, ok);
  return ok;
}

Status checkDecision(const Decision& d, schedule::Collective c, int nranks) {
  if (d.schedule.empty()) return invalidArgument("no schedule named");
  if (!schedule::isBuiltin(d.schedule) && !schedule::user::knows(d.schedule))
    return invalidArgument("unknown schedule '%s'", d.schedule.c_str());
  if (!scheduleServes(d.schedule, c, nranks))
    return invalidArgument("schedule '%s' does not serve %s with %d ranks", d.schedule.c_str(),
                           schedule::collectiveName(c), nranks);
  if (schedule::isBuiltin(d.schedule) && !paramsUsable(d.schedule, c, nranks, d.params)) {
    Status st = builtinAccepts(d.schedule, c, nranks, d.params);
    return invalidArgument("schedule '%s' with parameters '%s': %s", d.schedule.c_str(), d.params.toString().c_str(),
                           st.message().c_str());
  }
  if (d.sliceBytes != 0 && (d.sliceBytes < 64 || d.sliceBytes > (uint64_t(1) << 30)))
    return invalidArgument("slice size %llu is outside 64 bytes..1G", static_cast<unsigned long long>(d.sliceBytes));
  return Status::ok();
}

}  // namespace theseus::policy
