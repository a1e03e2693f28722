// Fixed-size user schedules: the programs a JSON file or an MSCCL XML
// algorithm spells out step by step, one per (rank count, root, layout).
//
// Selection. generate() picks the program written for the request's rank
// count and buffer layout. Layout kBoth means the same steps are correct out
// of place and in place (ir.h inPlaceAlias); both variants are verified when
// the file loads. For broadcast and reduce a program written for root r0
// serves any root by rotating rank labels (rank v plays rank v + root - r0):
// neither collective has rank-indexed blocks, so the rotated program computes
// the same collective for the new root (the cache verifies it again anyway).
// Gather and scatter address blocks by rank, so they need a program per root.
//
// In-place no-ops. With the in-place layout a copy between a buffer and the
// part of the other buffer it aliases is a copy onto itself. Such steps are
// dropped from the program handed out (explicit deps on them are redirected
// to their own deps), so files can say "in_place": "both" and keep the copy
// the out-of-place layout needs — except for a single rank's reduction, where
// that copy is the one read of the input, where a PreMulSum scales it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {

struct FixedProgram {
  Program program;  // program.inPlace is ignored: `layout` says which layouts it serves
  Layout layout = Layout::kOutOfPlace;
  std::string origin;  // where it is in the file: "/programs/1", "MSCCL algo 'x'"
  // Where step `step` of rank `rank` is in the file ("/ranks/2/steps/5",
  // "gpu 2 tb 1 step 3"), for error messages. May be empty.
  std::function<std::string(int rank, uint32_t step)> locate;
};

class FixedSchedule final : public UserSchedule {
 public:
  // Verifies every program in every layout it claims; the error names the
  // file, the program and (when the verifier names one) the step's location.
  static Result<std::shared_ptr<FixedSchedule>> create(ScheduleInfo info, Collective collective,
                                                       std::vector<FixedProgram> programs);

  bool supports(Collective c, int nranks) const override;
  bool serves(const GenerateRequest& req) const override;
  Result<Program> generate(const GenerateRequest& req) const override;

  Collective collective() const { return collective_; }
  const std::vector<FixedProgram>& programs() const { return programs_; }

 private:
  FixedSchedule(ScheduleInfo info, Collective collective, std::vector<FixedProgram> programs);
  const FixedProgram* pick(const GenerateRequest& req, bool* relabel) const;
  std::string available() const;

  Collective collective_;
  std::vector<FixedProgram> programs_;
};

// The program with in-place no-op copies removed (see above). `kept`, when
// given, receives for each remaining step of each rank its original index.
Program dropInPlaceNoops(const Program& p, std::vector<std::vector<uint32_t>>* kept = nullptr);

// Appends " (at <location>)" to a verifier message that names "rank R step S",
// translating S through `kept` (dropInPlaceNoops) when given.
std::string locateInMessage(const std::string& message, const FixedProgram& fp,
                            const std::vector<std::vector<uint32_t>>* kept);

}  // namespace theseus::schedule::user
