#include "schedule/program_cache.h"

#include "common/knobs.h"
#include "common/log.h"
#include "schedule/verifier.h"

namespace theseus::schedule {
namespace {

const BoolKnob kVerifyBuiltins("THESEUS_VERIFY_BUILTINS", false,
                               "Verify each built-in schedule program when it is first generated (user schedules "
                               "are always verified)");

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

}  // namespace

ProgramKey ProgramKey::make(std::string schedule, GenerateRequest request) {
  ProgramKey k;
  k.schedule = std::move(schedule);
  k.request = std::move(request);
  const GenerateRequest& r = k.request;
  if (!isRooted(r.collective)) k.request.root = 0;  // the root means nothing here: one key
  size_t h = std::hash<std::string>()(k.schedule);
  h = mix(h, r.params.hash());
  h = mix(h, static_cast<size_t>(r.collective));
  h = mix(h, static_cast<size_t>(r.nranks));
  h = mix(h, static_cast<size_t>(k.request.root));
  h = mix(h, static_cast<size_t>(r.inPlace));
  h = mix(h, static_cast<size_t>(r.onlyRank + 1));
  for (int host : r.hostOf) h = mix(h, static_cast<size_t>(host));
  k.hash = h;
  return k;
}

bool ProgramKey::operator==(const ProgramKey& o) const {
  const GenerateRequest &a = request, &b = o.request;
  return hash == o.hash && a.collective == b.collective && a.nranks == b.nranks && a.root == b.root &&
         a.inPlace == b.inPlace && a.onlyRank == b.onlyRank && schedule == o.schedule && a.params == b.params &&
         a.hostOf == b.hostOf;
}

std::string ProgramKey::toString() const {
  std::string params = request.params.toString();
  std::string out = schedule + (params.empty() ? "" : "(" + params + ")") + " " + collectiveName(request.collective) +
                    " nranks=" + std::to_string(request.nranks);
  if (isRooted(request.collective)) out += " root=" + std::to_string(request.root);
  if (request.inPlace) out += " in-place";
  if (request.onlyRank >= 0) out += " rank=" + std::to_string(request.onlyRank);
  return out;
}

ProgramCache::ProgramCache() : ProgramCache(Options{}) {}

ProgramCache::ProgramCache(Options options)
    : options_(std::move(options)),
      verifyBuiltins_(options_.verifyBuiltins < 0 ? kVerifyBuiltins.get() : options_.verifyBuiltins != 0) {}

Result<std::shared_ptr<const CachedProgram>> ProgramCache::get(const ProgramKey& key) {
  std::shared_ptr<Entry> e;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) e = it->second;
  }
  if (!e) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto [it, inserted] = map_.try_emplace(key, nullptr);
    if (inserted) it->second = std::make_shared<Entry>();
    e = it->second;
    if (inserted && map_.size() > kMaxEntries) evictUnusedLocked();
  }
  if (!e->ready.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(e->mu);
    if (!e->ready.load(std::memory_order_relaxed)) {
      Result<std::shared_ptr<const CachedProgram>> built = build(key);
      if (built.isOk())
        e->value = built.take();
      else
        e->error = built.status();
      generations_.fetch_add(1, std::memory_order_relaxed);
      e->ready.store(true, std::memory_order_release);
    }
  }
  if (e->value) return e->value;
  return e->error;
}

// Bounded memory: a long job that swaps among many schedules (random test tables, a policy
// that tries ring orders) would otherwise keep every program it ever used. Above kMaxEntries,
// programs nobody holds any more (no decision table's templates point to them) are dropped;
// one asked for again is generated again. Entries being built and failures stay.
void ProgramCache::evictUnusedLocked() {
  for (auto it = map_.begin(); it != map_.end();) {
    const Entry& e = *it->second;
    if (e.ready.load(std::memory_order_acquire) && e.value && e.value.use_count() == 1) it = map_.erase(it);
    else ++it;
  }
}

Result<Program> ProgramCache::generate(const std::string& schedule, const GenerateRequest& req) const {
  if (isBuiltin(schedule)) return generateBuiltin(schedule, req);
  if (!options_.external)
    return invalidArgument("unknown schedule '%s': not a built-in and no schedule loader is installed",
                           schedule.c_str());
  return options_.external(schedule, req);
}

Result<std::shared_ptr<const CachedProgram>> ProgramCache::build(const ProgramKey& key) {
  const GenerateRequest& req = key.request;
  const bool builtin = isBuiltin(key.schedule);
  auto cached = std::make_shared<CachedProgram>();
  if (!builtin || verifyBuiltins_) {
    // Verification needs every rank's program, even when only one is kept.
    GenerateRequest all = req;
    all.onlyRank = -1;
    TH_ASSIGN(Program full, generate(key.schedule, all));
    Status st = verifyProgram(full);
    if (!st.isOk()) {
      std::string what = "program " + key.toString() + " failed verification";
      if (builtin) return internalError("%s (a bug in the built-in): %s", what.c_str(), st.message().c_str());
      return st.withContext(what);
    }
    cached->verified = true;
    if (req.onlyRank < 0) cached->program = std::move(full);
  }
  if (!cached->verified || req.onlyRank >= 0) {
    Result<Program> made = generate(key.schedule, req);
    if (!made.isOk()) return made.status().withContext("program " + key.toString());
    cached->program = made.take();
  }
  const Program& p = cached->program;
  if (p.nranks != req.nranks || p.collective != req.collective || p.inPlace != req.inPlace)
    return invalidArgument("program %s: the generator returned a program for %s nranks=%d%s", key.toString().c_str(),
                           collectiveName(p.collective), p.nranks, p.inPlace ? " in-place" : "");
  if (req.onlyRank >= 0) {
    cached->plans.resize(p.nranks);
    Result<RankPlan> plan = analyzeRank(p, req.onlyRank);
    if (!plan.isOk()) return plan.status().withContext("program " + key.toString());
    cached->plans[req.onlyRank] = plan.take();
  } else {
    Result<std::vector<RankPlan>> plans = analyzeProgram(p);
    if (!plans.isOk()) return plans.status().withContext("program " + key.toString());
    cached->plans = plans.take();
  }
  TH_INFO(log::kSchedule, "schedule cache: generated %s (%s)", key.toString().c_str(),
          cached->verified ? "verified" : "not verified");
  return std::shared_ptr<const CachedProgram>(std::move(cached));
}

size_t ProgramCache::size() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return map_.size();
}

void ProgramCache::clear() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  map_.clear();
}

}  // namespace theseus::schedule
