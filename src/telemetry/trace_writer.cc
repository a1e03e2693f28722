#include "telemetry/trace_writer.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/knobs.h"
#include "common/log.h"
#include "exec/plan.h"

namespace theseus::telemetry {
namespace {

const StringKnob kTrace("THESEUS_TRACE", nullptr,
                        "Directory for per-rank Chrome/Perfetto traces (theseus-trace.<comm>.<rank>.json, written "
                        "when the communicator goes away; theseus-trace merge joins them); unset: no traces");
const IntKnob kMaxEvents("THESEUS_TRACE_MAX_EVENTS", 1000000, "Events a rank's trace keeps; later ones are dropped");
const IntKnob kSteps("THESEUS_TRACE_STEPS", 100,
                     "With THESEUS_TRACE: the per-peer steps of one operation in this many are traced (1: every "
                     "operation; 0: none)");

double bitsToDouble(uint64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof(d));
  return d;
}

}  // namespace

bool TraceWriter::enabled() { return !kTrace.get().empty(); }

std::unique_ptr<TraceWriter> TraceWriter::create(Identity id) {
  std::string dir = kTrace.get();
  if (dir.empty()) return nullptr;
  auto w = std::unique_ptr<TraceWriter>(new TraceWriter(id, dir));
  w->maxEvents_ = static_cast<size_t>(std::max<int64_t>(kMaxEvents.get(), 0));
  w->events_.reserve(std::min<size_t>(w->maxEvents_, 1 << 16));
  w->stepEvery_ = static_cast<uint64_t>(std::max<int64_t>(kSteps.get(), 0));
  w->untilSample_ = 0;  // the first operation is traced step by step
  return w;
}

void TraceWriter::setClock(int64_t offsetNs, int64_t errorNs) {
  std::lock_guard lock(mu_);
  offsetNs_ = offsetNs;
  errorNs_ = errorNs;
}

uint32_t TraceWriter::intern(const char* s) {
  if (s == nullptr) s = "";
  // Most operations repeat the last few names: a pointer compare before the map.
  for (const auto& [p, index] : recent_)
    if (p == s) return index;
  auto it = interned_.find(s);
  if (it != interned_.end()) {
    recent_[recentNext_++ % recent_.size()] = {s, it->second};
    return it->second;
  }
  if (it != interned_.end()) return it->second;
  strings_.emplace_back(s);
  const auto index = static_cast<uint32_t>(strings_.size() - 1);
  interned_.emplace(s, index);
  recent_[recentNext_++ % recent_.size()] = {s, index};
  return index;
}

void TraceWriter::operation(const char* op, const char* schedule, uint64_t seq, uint64_t bytes, uint64_t startNs,
                            uint64_t endNs) {
  std::lock_guard lock(mu_);  // uncontended: only finish() takes it from elsewhere
  if (events_.size() >= maxEvents_) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{0, intern(op), intern(schedule), seq, bytes, startNs, endNs, 0, 0});
}

exec::StepTiming* TraceWriter::sampleSteps(size_t steps) {
  if (stepEvery_ == 0) return nullptr;
  if (untilSample_ > 0) {
    --untilSample_;
    return nullptr;
  }
  untilSample_ = stepEvery_ - 1;
  stepTimes_.assign(steps, exec::StepTiming{});  // keeps its capacity: no allocation once grown
  return stepTimes_.data();
}

void TraceWriter::steps(const exec::Plan& plan, uint64_t planStartNs) {
  if (plan.stepTimes == nullptr) return;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const exec::PlanStep& st = plan.steps[i];
    const exec::StepTiming& t = plan.stepTimes[i];
    const int peer = st.recvPeer >= 0 ? st.recvPeer : st.sendPeer;
    if (peer < 0 || t.endNs == 0) continue;  // local copies and reductions: not a peer's step
    if (events_.size() >= maxEvents_) {
      ++dropped_;
      continue;
    }
    const uint64_t first = t.firstNs != 0 ? t.firstNs : t.endNs;
    const uint64_t waited = first > planStartNs ? first - planStartNs : 0;
    events_.push_back(Event{3, intern(schedule::opName(st.op)), static_cast<uint32_t>(i), plan.seq, st.bytes,
                            std::min(first, t.endNs), t.endNs, static_cast<uint64_t>(peer), waited});
  }
}

void TraceWriter::attribute(uint64_t atNs, const std::string& name, double value) {
  std::lock_guard lock(mu_);
  if (events_.size() >= maxEvents_) {
    ++dropped_;
    return;
  }
  auto [it, added] = attributeNames_.try_emplace(name, static_cast<uint32_t>(strings_.size()));
  if (added) strings_.push_back(name);
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  events_.push_back(Event{4, it->second, 0, 0, 0, atNs, atNs, bits, 0});
}

void TraceWriter::swap(uint64_t atNs, uint64_t fromSeq, uint64_t oldVersion, uint64_t newVersion,
                       const std::string& why) {
  std::lock_guard lock(mu_);
  strings_.push_back(why);
  events_.push_back(Event{1, 0, static_cast<uint32_t>(strings_.size() - 1), fromSeq, 0, atNs, atNs, oldVersion,
                          newVersion});
}

void TraceWriter::error(uint64_t atNs, const std::string& what) {
  std::lock_guard lock(mu_);
  strings_.push_back(what);
  events_.push_back(Event{2, 0, static_cast<uint32_t>(strings_.size() - 1), 0, 0, atNs, atNs, 0, 0});
}

// Operations and steps are complete events ("X"), swaps and errors instant events ("i"),
// attribute changes counter events ("C", one counter track per attribute).
nlohmann::json TraceWriter::eventJson(const Event& e) const {
  const double ts = static_cast<double>(e.startNs) / 1e3;
  switch (e.kind) {
    case 0:
      return {{"name", strings_[e.name]}, {"cat", "operation"}, {"ph", "X"}, {"ts", ts},
              {"dur", static_cast<double>(e.endNs - e.startNs) / 1e3}, {"pid", id_.rank}, {"tid", 0},
              {"args", {{"seq", e.seq}, {"schedule", strings_[e.detail]}, {"bytes", e.bytes}}}};
    case 3:
      return {{"name", strings_[e.name]}, {"cat", "step"}, {"ph", "X"}, {"ts", ts},
              {"dur", static_cast<double>(e.endNs - e.startNs) / 1e3}, {"pid", id_.rank}, {"tid", 1 + e.a},
              {"args", {{"seq", e.seq}, {"step", e.detail}, {"peer", e.a}, {"bytes", e.bytes},
                        {"waited_us", static_cast<double>(e.b) / 1e3}}}};
    case 4:
      return {{"name", strings_[e.name]}, {"cat", "attribute"}, {"ph", "C"}, {"ts", ts}, {"pid", id_.rank},
              {"tid", 0}, {"args", {{"value", bitsToDouble(e.a)}}}};
    default: {
      nlohmann::json args = {{"why", strings_[e.detail]}};
      if (e.kind == 1) args.update({{"from_seq", e.seq}, {"old_version", e.a}, {"new_version", e.b}});
      return {{"name", e.kind == 1 ? "schedule swap" : "error"}, {"cat", e.kind == 1 ? "epoch" : "error"},
              {"ph", "i"}, {"s", "p"}, {"ts", ts}, {"pid", id_.rank}, {"tid", 0}, {"args", args}};
    }
  }
}

std::string TraceWriter::finish() {
  std::lock_guard lock(mu_);
  if (finished_) return "";
  finished_ = true;
  char hash[24];
  snprintf(hash, sizeof(hash), "%016" PRIx64, id_.commHash);
  nlohmann::json events = nlohmann::json::array();
  const std::string track = std::string("comm ") + hash;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", id_.rank}, {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(id_.rank)}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", id_.rank}, {"tid", 0}, {"args", {{"name", track}}}});
  std::vector<bool> peerTrack(static_cast<size_t>(std::max(id_.nranks, 0)), false);
  for (const Event& e : events_) {
    if (e.kind == 3 && e.a < peerTrack.size() && !peerTrack[e.a]) {
      peerTrack[e.a] = true;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", id_.rank}, {"tid", 1 + e.a},
                        {"args", {{"name", "steps with peer " + std::to_string(e.a)}}}});
    }
    events.push_back(eventJson(e));
  }
  nlohmann::json out = {{"traceEvents", events},
                        {"displayTimeUnit", "ns"},
                        {"theseus",
                         {{"format", 1},
                          {"rank", id_.rank},
                          {"nranks", id_.nranks},
                          {"comm", hash},
                          {"clock_offset_ns", offsetNs_},
                          {"clock_error_ns", errorNs_},
                          {"dropped_events", dropped_}}}};
  const std::string path = dir_ + "/theseus-trace." + hash + "." + std::to_string(id_.rank) + ".json";
  const std::string text = out.dump() + "\n";
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr || fwrite(text.data(), 1, text.size(), f) != text.size() || fclose(f) != 0) {
    TH_WARN("THESEUS_TRACE: cannot write %s: %s", path.c_str(), strerror(errno));
    return "";
  }
  TH_INFO(log::kInit, "rank %d: trace of %zu events written to %s", id_.rank, events_.size(), path.c_str());
  return path;
}

}  // namespace theseus::telemetry
