// Live verdicts: the communicator's leader runs the doctor's performance
// analysis (doctor/performance.h) on its cluster view every
// THESEUS_DOCTOR_INTERVAL_MS and publishes what it finds as attributes of its
// own (rank 0's) store, so that policies can react (docs/attributes.md):
//
//   doctor.slow_link.<a>.<b>        the link a -> b is that many times slower than typical
//   doctor.slow_host.<h>            host h (host index: hosts numbered in the order of
//                                   their lowest rank) - its links to other hosts, median
//   doctor.comm_straggler.<r>       rank r's own sends or receives, that many times slower
//   doctor.compute_straggler.<r>    rank r starts collectives that many µs late
//   doctor.culprit.rank             the rank of the most serious verdict (a slow host: its
//                                   lowest rank; a slow link: its sender) ...
//   doctor.culprit.host             ... and its host
// Nothing is published while nothing is wrong; a verdict that ends disappears.
//
// Hysteresis. One evaluation is a moment: a burst of scheduling noise on a busy
// host can make a link look slow once. A verdict is published after
// kConfirm evaluations in a row found it, and withdrawn only after none found
// it for kHoldNs (a link that flaps every second stays named while it flaps,
// and a policy routing around it does not flap with it); its value is the
// latest found.
//
// Cost: the leader's epoch thread, once per interval, O(ranks^2) over the
// view; nothing on any collective's path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attrs/attribute_store.h"
#include "attrs/cluster_view.h"
#include "doctor/performance.h"
#include "doctor/verdict.h"

namespace theseus::doctor {

class LiveDoctor {
 public:
  static constexpr int kConfirm = 2;
  static constexpr uint64_t kHoldNs = 3'000'000'000;
  static constexpr uint64_t kMaxAgeNs = 5'000'000'000;  // measurements older than this are ignored

  explicit LiveDoctor(Placement placement, Thresholds t = {}) : placement_(std::move(placement)), t_(t) {}

  // THESEUS_DOCTOR_INTERVAL_MS (0: live verdicts off).
  static int64_t configuredIntervalMs();

  // Analyses the view; returns whether the published set changed.
  bool evaluate(const attrs::ClusterView& view, uint64_t nowNs);
  // The attributes to publish now (complete: every doctor.* name, with its value).
  const std::map<std::string, double>& published() const { return published_; }
  // The findings behind the published names (their words, for logs).
  std::string describe() const;
  // Writes published() into `store` (source probe): new and changed names are
  // set, doctor.* names no longer published are cleared.
  void publish(attrs::AttributeStore& store) const;

 private:
  struct Candidate {
    double value = 0;
    int streak = 0;          // evaluations in a row that found it
    uint64_t lastSeenNs = 0;
    bool published = false;
    int rank = -1, host = -1, priority = 0;  // for the culprit
    std::string words;
  };
  void note(const std::string& name, const Finding& f, uint64_t nowNs);
  void choose();

  Placement placement_;
  Thresholds t_;
  std::map<std::string, Candidate> candidates_;
  std::map<std::string, double> published_;
};

// The attribute names of a finding's verdict ("doctor.slow_link.2.5", one per link of a slow
// path), none for kinds without one.
std::vector<std::string> verdictNames(const Finding& f);

}  // namespace theseus::doctor
