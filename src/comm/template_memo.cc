#include "comm/template_memo.h"

#include <algorithm>

#include "common/log.h"
#include "policy/decision_check.h"
#include "policy/default_selector.h"
#include "schedule/user/user_schedules.h"
#include "transport/transport_manager.h"

namespace theseus::comm {
namespace {

using schedule::Collective;

// Programs are shared by every communicator of the process. Names that are not
// built-ins are user schedules (THESEUS_SCHEDULES, or a file path a policy names).
schedule::ProgramCache& programCache() {
  static schedule::ProgramCache cache(schedule::ProgramCache::Options{schedule::user::generate, -1});
  return cache;
}

// The entry's range id of a request: the table's range index, or for a collective
// the table leaves out (the static choice applies) -1 - its size class.
int rangeOf(const policy::DecisionTable& t, Collective c, size_t bytes) {
  int r = t.rangeIndex(c, bytes);
  return r >= 0 ? r : -1 - policy::sizeClass(bytes);
}

}  // namespace

struct TemplateMemo::Warm final : epoch::Prepared {
  std::vector<std::pair<Key, Entry>> entries;
};

uint8_t TemplateMemo::deviceClass(const Request& req) const {
  return !req.device ? 0 : req.bytes >= settings_.deviceChannelBytes ? 2 : 1;
}

TemplateMemo::Key TemplateMemo::keyOf(const policy::DecisionTable& table, uint64_t version, const Request& req) const {
  return Key{version, static_cast<uint8_t>(req.collective), static_cast<uint8_t>(req.inPlace), deviceClass(req),
             static_cast<int16_t>(rangeOf(table, req.collective, req.bytes)), req.root};
}

std::pair<std::string, schedule::ScheduleParams> TemplateMemo::choose(const policy::Decision* d,
                                                                      const Request& req) const {
  const int nnodes = settings_.hostOf.empty() ? 1 : *std::max_element(settings_.hostOf.begin(), settings_.hostOf.end()) + 1;
  const policy::RequestShape shape{req.collective, policy::sizeClass(req.bytes), settings_.nranks, nnodes};
  const policy::AlgoFilter filter = policy::AlgoFilter::fromEnv();
  // The table says nothing about this collective: the default choice (THESEUS_SCHEDULE first).
  policy::Choice chosen = d ? policy::Choice{d->schedule, d->params} : policy::defaultChoice(shape, filter);
  schedule::GenerateRequest probe;
  probe.collective = req.collective;
  probe.nranks = settings_.nranks;
  probe.root = req.root;
  probe.inPlace = req.inPlace;
  probe.params = chosen.params;
  probe.hostOf = settings_.hostOf;
  if (policy::scheduleServesRequest(chosen.schedule, probe)) return {chosen.schedule, chosen.params};
  // A fixed program for another layout or root only: the static choice runs this call.
  policy::Choice fallback = policy::staticChoice(shape, filter);
  std::lock_guard<std::mutex> lock(loggedMu_);
  if (logged_.emplace(chosen.schedule, static_cast<int>(req.collective), req.inPlace, req.root).second)
    TH_INFO(log::kColl | log::kTuning | log::kSchedule,
            "rank %d: schedule %s has no program for %s nranks=%d%s %s; %s runs these calls instead", settings_.rank,
            chosen.schedule.c_str(), schedule::collectiveName(req.collective), settings_.nranks,
            schedule::isRooted(req.collective) ? (" root=" + std::to_string(req.root)).c_str() : "",
            req.inPlace ? "in place" : "out of place", fallback.schedule.c_str());
  return {fallback.schedule, fallback.params};
}

// The device executor runs a plan's independent channels on thread blocks side
// by side (exec/device/dev_split.h), and one block moves what one SM moves, so
// a large device operation whose decision leaves a built-in at one channel
// gets THESEUS_DEVICE_CHANNELS. Every input is equal on all ranks (the
// decision, the size, the knobs; an operation's buffers are device memory on
// every rank or on none), so every rank runs the same program. The memo keys
// device operations apart, and below and from the threshold apart (one size
// range of a decision may hold both); the INFO line of a new entry names the program
// with its parameters ("ring(channels=8)").
schedule::ScheduleParams TemplateMemo::deviceParams(const std::string& schedule, schedule::ScheduleParams params,
                                                    const Request& req) const {
  const int channels = req.device ? settings_.deviceChannelsFor(req.bytes) : 1;
  if (channels > 1 && params.channels == 1 && settings_.nranks > 1 && schedule::isBuiltin(schedule))
    params.channels = channels;
  return params;
}

Result<TemplateMemo::Entry> TemplateMemo::build(const policy::DecisionTable& table, int range,
                                                const Request& req) const {
  const policy::Decision* d =
      range >= 0 ? &table.ranges(req.collective)[static_cast<size_t>(range)].decision : nullptr;
  auto [name, params] = choose(d, req);
  schedule::GenerateRequest gen;
  gen.collective = req.collective;
  gen.nranks = settings_.nranks;
  gen.root = req.root;
  gen.inPlace = req.inPlace;
  gen.params = deviceParams(name, params, req);
  gen.hostOf = settings_.hostOf;
  gen.onlyRank = settings_.rank;
  Entry e;
  TH_ASSIGN(e.program, programCache().get(schedule::ProgramKey::make(name, gen)));
  // Device channels multiply into a schedule's own (a double binary tree has two per channel): fewer until the
  // program fits THESEUS_MAX_CHANNELS (the same on every rank), never below the decision's own.
  while (gen.params.channels > params.channels && e.program->program.nchannels > static_cast<uint32_t>(settings_.maxChannels)) {
    gen.params.channels = std::max(params.channels, gen.params.channels * settings_.maxChannels /
                                                        static_cast<int>(e.program->program.nchannels));
    TH_ASSIGN(e.program, programCache().get(schedule::ProgramKey::make(name, gen)));
  }
  const schedule::Program& prog = e.program->program;
  if (prog.nchannels > static_cast<uint32_t>(settings_.maxChannels))
    return invalidUsage("schedule %s needs %u channels but THESEUS_MAX_CHANNELS is %d", prog.name.c_str(),
                        prog.nchannels, settings_.maxChannels);
  TH_ASSIGN(e.tmpl, exec::buildRankTemplate(prog, settings_.rank, e.program->plans[settings_.rank]));
  e.sliceBytes = settings_.sliceBytes;
  if (d != nullptr && d->sliceBytes > 0 && name == d->schedule)
    e.sliceBytes =
        std::clamp<size_t>(d->sliceBytes / 64 * 64, 64, std::max<size_t>(settings_.maxSliceBytes, 64));
  return e;
}

Result<const TemplateMemo::Entry*> TemplateMemo::find(const policy::DecisionTable& table, uint64_t version,
                                                      const Request& req) {
  const Key key = keyOf(table, version, req);
  auto it = entries_.find(key);
  if (it != entries_.end()) return &it->second;

  Entry e;
  TH_ASSIGN(e, build(table, key.range, req));
  TH_INFO(log::kColl | log::kTuning, "rank %d: %s of %zu bytes%s uses %s (table v%llu)", settings_.rank,
          schedule::collectiveName(req.collective), req.bytes, req.device ? " on the device" : "",
          e.program->program.name.c_str(), static_cast<unsigned long long>(version));
  {
    std::lock_guard<std::mutex> lock(shapesMu_);
    bool seen = false;
    for (const Request& sh : shapes_)
      if (sh.collective == req.collective && sh.root == req.root && sh.inPlace == req.inPlace &&
          deviceClass(sh) == key.device &&
          rangeOf(table, req.collective, sh.bytes) == key.range) {
        seen = true;
        break;
      }
    if (!seen && shapes_.size() < kMaxShapes) shapes_.push_back(req);
  }
  return &entries_.emplace(key, std::move(e)).first->second;
}

// Epoch thread: the templates of every request shape seen so far under the new
// table, and the connections they use, so the first collectives on the new
// table find everything ready.
Result<std::unique_ptr<epoch::Prepared>> TemplateMemo::prepare(const policy::DecisionTable& table, uint64_t version,
                                                               transport::TransportManager* transports) {
  std::vector<Request> shapes;
  {
    std::lock_guard<std::mutex> lock(shapesMu_);
    shapes = shapes_;
  }
  auto warm = std::make_unique<Warm>();
  for (const Request& sh : shapes) {
    const Key key = keyOf(table, version, sh);
    bool have = false;
    for (const auto& kv : warm->entries) have = have || kv.first == key;
    if (have) continue;
    Entry e;
    TH_ASSIGN(e, build(table, key.range, sh));
    if (transports != nullptr) {
      for (const exec::PlanConn& c : e.tmpl->conns) {
        Status st = c.isSend ? transports->sendConnection(c.peer, c.channel).status()
                             : transports->recvConnection(c.peer, c.channel).status();
        TH_CHECK(st.withContext("opening the connections of " + e.program->program.name));
      }
    }
    warm->entries.emplace_back(key, std::move(e));
  }
  return std::unique_ptr<epoch::Prepared>(std::move(warm));
}

void TemplateMemo::adopt(uint64_t version, std::unique_ptr<epoch::Prepared> prepared) {
  floor_ = version;  // a group may still run plans of older entries: they go at the next dropStale()
  if (auto* warm = dynamic_cast<Warm*>(prepared.get()))
    for (auto& [key, entry] : warm->entries) entries_.emplace(key, std::move(entry));
}

void TemplateMemo::dropStale() {
  if (floor_ == 0) return;
  std::erase_if(entries_, [this](const auto& kv) { return kv.first.version < floor_; });
  floor_ = 0;
}

std::vector<uint64_t> TemplateMemo::recentSizes() {
  std::lock_guard<std::mutex> lock(shapesMu_);
  std::vector<uint64_t> out;
  for (const Request& sh : shapes_) out.push_back(sh.bytes);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void TemplateMemo::clear() { entries_.clear(); }

}  // namespace theseus::comm
