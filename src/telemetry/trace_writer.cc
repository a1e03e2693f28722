#include "telemetry/trace_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <type_traits>
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
  w->events_ = std::make_unique<ChunkedLog<Event>>(w->maxEvents_);
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

void TraceWriter::keep(const Event& e) {
  if (!events_->push(e)) ++dropped_;  // no memory for another chunk
}

void TraceWriter::operation(const char* op, const char* schedule, uint64_t seq, uint64_t bytes, uint64_t startNs,
                            uint64_t endNs) {
  std::lock_guard lock(mu_);  // uncontended: only finish() takes it from elsewhere
  if (events_->size() >= maxEvents_) {
    ++dropped_;
    return;
  }
  keep(Event{0, intern(op), intern(schedule), seq, bytes, startNs, endNs, 0, 0});
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
    if (events_->size() >= maxEvents_) {
      ++dropped_;
      continue;
    }
    const uint64_t first = t.firstNs != 0 ? t.firstNs : t.endNs;
    const uint64_t waited = first > planStartNs ? first - planStartNs : 0;
    keep(Event{3, intern(schedule::opName(st.op)), static_cast<uint32_t>(i), plan.seq, st.bytes,
               std::min(first, t.endNs), t.endNs, static_cast<uint64_t>(peer), waited});
  }
}

void TraceWriter::attribute(uint64_t atNs, const std::string& name, double value) {
  std::lock_guard lock(mu_);
  if (events_->size() >= maxEvents_) {
    ++dropped_;
    return;
  }
  auto [it, added] = attributeNames_.try_emplace(name, static_cast<uint32_t>(strings_.size()));
  if (added) strings_.push_back(name);
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  keep(Event{4, it->second, 0, 0, 0, atNs, atNs, bits, 0});
}

void TraceWriter::swap(uint64_t atNs, uint64_t fromSeq, uint64_t oldVersion, uint64_t newVersion,
                       const std::string& why) {
  std::lock_guard lock(mu_);
  strings_.push_back(why);
  keep(Event{1, 0, static_cast<uint32_t>(strings_.size() - 1), fromSeq, 0, atNs, atNs, oldVersion, newVersion});
}

void TraceWriter::error(uint64_t atNs, const std::string& what) {
  std::lock_guard lock(mu_);
  strings_.push_back(what);
  keep(Event{2, 0, static_cast<uint32_t>(strings_.size() - 1), 0, 0, atNs, atNs, 0, 0});
}

// The file is streamed, event by event, into a buffer written out every
// MiB: a trace of a million events costs about a microsecond of formatting per
// event and a megabyte of memory at the communicator's end (a JSON document
// built in memory first cost ~50,000 instructions and over a kilobyte per
// event). Names and texts are quoted once each (strings_ holds every text an
// event refers to); times are the steady clock's ns printed as µs with three
// decimals, exact.
//
// Operations and steps are complete events ("X"), swaps and errors instant events ("i"),
// attribute changes counter events ("C", one counter track per attribute).
class TraceWriter::JsonStream {
 public:
  explicit JsonStream(FILE* f) : f_(f) { buf_.reserve(kFlushBytes + 4096); }
  JsonStream& raw(std::string_view s) {
    buf_ += s;
    return *this;
  }
  template <typename I>
    requires std::is_integral_v<I>
  JsonStream& num(I v) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof(b), v);
    buf_.append(b, r.ptr);
    return *this;
  }
  JsonStream& num(double v) {
    if (!std::isfinite(v)) return raw("null");  // JSON has no NaN or infinity
    char b[32];
    auto r = std::to_chars(b, b + sizeof(b), v);
    buf_.append(b, r.ptr);
    return *this;
  }
  // ns as µs, exactly (three decimals).
  JsonStream& us(uint64_t ns) {
    num(ns / 1000);
    char b[5] = {'.', static_cast<char>('0' + ns / 100 % 10), static_cast<char>('0' + ns / 10 % 10),
                 static_cast<char>('0' + ns % 10), 0};
    return raw(b);
  }
  // After each event: writes the buffer once it holds a MiB. False when a write failed.
  bool flushIfFull() { return buf_.size() < kFlushBytes || flush(); }
  bool flush() {
    const bool ok = fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
    buf_.clear();
    return ok;
  }

 private:
  static constexpr size_t kFlushBytes = 1 << 20;
  FILE* f_;
  std::string buf_;
};

namespace {

// Texts that are not UTF-8 become U+FFFD: a trace stays valid JSON whatever a reason says.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void TraceWriter::writeEvent(JsonStream& out, const Event& e, const std::vector<std::string>& q,
                             std::string_view pid) const {
  switch (e.kind) {
    case 0:
      out.raw("{\"name\":").raw(q[e.name]).raw(",\"cat\":\"operation\",\"ph\":\"X\",\"ts\":").us(e.startNs);
      out.raw(",\"dur\":").us(e.endNs - e.startNs).raw(",\"pid\":").raw(pid).raw(",\"tid\":0,\"args\":{\"seq\":");
      out.num(e.seq).raw(",\"schedule\":").raw(q[e.detail]).raw(",\"bytes\":").num(e.bytes).raw("}}");
      return;
    case 3:
      out.raw("{\"name\":").raw(q[e.name]).raw(",\"cat\":\"step\",\"ph\":\"X\",\"ts\":").us(e.startNs);
      out.raw(",\"dur\":").us(e.endNs - e.startNs).raw(",\"pid\":").raw(pid).raw(",\"tid\":").num(1 + e.a);
      out.raw(",\"args\":{\"seq\":").num(e.seq).raw(",\"step\":").num(e.detail).raw(",\"peer\":");
      out.num(e.a).raw(",\"bytes\":").num(e.bytes).raw(",\"waited_us\":").us(e.b).raw("}}");
      return;
    case 4:
      out.raw("{\"name\":").raw(q[e.name]).raw(",\"cat\":\"attribute\",\"ph\":\"C\",\"ts\":").us(e.startNs);
      out.raw(",\"pid\":").raw(pid).raw(",\"tid\":0,\"args\":{\"value\":").num(bitsToDouble(e.a)).raw("}}");
      return;
    default:
      out.raw(e.kind == 1 ? "{\"name\":\"schedule swap\",\"cat\":\"epoch\"" : "{\"name\":\"error\",\"cat\":\"error\"");
      out.raw(",\"ph\":\"i\",\"s\":\"p\",\"ts\":").us(e.startNs).raw(",\"pid\":").raw(pid);
      out.raw(",\"tid\":0,\"args\":{\"why\":").raw(q[e.detail]);
      if (e.kind == 1) {
        out.raw(",\"from_seq\":").num(e.seq).raw(",\"old_version\":").num(e.a);
        out.raw(",\"new_version\":").num(e.b);
      }
      out.raw("}}");
  }
}

std::string TraceWriter::finish() {
  std::lock_guard lock(mu_);
  if (finished_) return "";
  finished_ = true;
  char hash[24];
  snprintf(hash, sizeof(hash), "%016" PRIx64, id_.commHash);
  const std::string rankText = std::to_string(id_.rank);
  const std::string path = dir_ + "/theseus-trace." + hash + "." + rankText + ".json";
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    TH_WARN("THESEUS_TRACE: cannot write %s: %s", path.c_str(), strerror(errno));
    return "";
  }
  std::vector<std::string> q;
  q.reserve(strings_.size());
  for (const std::string& s : strings_) q.push_back(quoted(s));

  JsonStream out(f);
  out.raw("{\"traceEvents\":[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":").raw(rankText);
  out.raw(",\"tid\":0,\"args\":{\"name\":\"rank ").raw(rankText).raw("\"}},");
  out.raw("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":").raw(rankText);
  out.raw(",\"tid\":0,\"args\":{\"name\":\"comm ").raw(hash).raw("\"}}");
  std::vector<bool> peerTrack(static_cast<size_t>(std::max(id_.nranks, 0)), false);
  bool ok = true;
  events_->forEach([&](const Event& e) {
    if (e.kind == 3 && e.a < peerTrack.size() && !peerTrack[e.a]) {
      peerTrack[e.a] = true;
      out.raw(",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":").raw(rankText).raw(",\"tid\":").num(1 + e.a);
      out.raw(",\"args\":{\"name\":\"steps with peer ").num(e.a).raw("\"}}");
    }
    out.raw(",");
    writeEvent(out, e, q, rankText);
    ok = out.flushIfFull() && ok;
  });
  out.raw("],\"displayTimeUnit\":\"ns\",\"theseus\":{\"format\":1,\"rank\":").raw(rankText);
  out.raw(",\"nranks\":").num(id_.nranks).raw(",\"comm\":\"").raw(hash).raw("\",\"clock_offset_ns\":");
  out.num(offsetNs_).raw(",\"clock_error_ns\":").num(errorNs_).raw(",\"dropped_events\":").num(dropped_).raw("}}\n");
  ok = out.flush() && ok;
  if (fclose(f) != 0 || !ok) {
    TH_WARN("THESEUS_TRACE: cannot write %s: %s", path.c_str(), strerror(errno));
    return "";
  }
  TH_INFO(log::kInit, "rank %d: trace of %zu events written to %s", id_.rank, events_->size(), path.c_str());
  return path;
}

}  // namespace theseus::telemetry
