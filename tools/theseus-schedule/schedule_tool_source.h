// theseus-schedule: what a command works on - a schedule file (JSON, MSCCL
// XML, plugin) or a built-in - behind one interface, and the list of
// (collective, rank count, layout, root) cases a verification covers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/builtins.h"
#include "schedule/user/fixed_schedule.h"
#include "schedule/user/user_schedules.h"

namespace theseus::tool {

using schedule::Collective;
using schedule::GenerateRequest;
using schedule::Program;

// Command-line choices that narrow what a command looks at.
struct Selection {
  std::optional<int> nranks;
  std::optional<Collective> collective;
  std::optional<int> root;
  std::optional<bool> inPlace;
};

class Source {
 public:
  // A path to a .json/.xml/.so file, or a built-in name.
  static Result<Source> open(const std::string& what);

  std::string label() const;  // "json policies/x.json", "built-in ring"
  std::string name() const;
  const schedule::user::FixedSchedule* fixed() const;  // JSON/XML, else null
  const schedule::user::UserSchedule* user() const { return user_.get(); }
  bool supports(Collective c, int nranks) const;
  Result<Program> generate(const GenerateRequest& req) const;

  // Every case `sel` allows: fixed schedules have their own rank counts and
  // layouts; plugins and built-ins get rank counts 1..8 and 16 unless --nranks.
  std::vector<GenerateRequest> cases(const Selection& sel) const;

 private:
  schedule::user::ScheduleHandle user_;
  std::string builtin_;
};

// The one case `show`/`export` work on, or a usage error saying what to add.
Result<GenerateRequest> pickCase(const Source& src, const Selection& sel);

std::string caseText(const GenerateRequest& req);  // "allreduce nranks=4 root=0 in-place"

}  // namespace theseus::tool
