#include "telemetry/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "attrs/attribute_store.h"
#include "common/deadline.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/path_template.h"
#include "transport/transport_manager.h"

namespace theseus::telemetry {
namespace {

const IntKnob kEntries("THESEUS_FLIGHT_RECORDER_ENTRIES", 256,
                       "Operations each communicator's flight recorder keeps (docs/observability.md); 1..65536");
const StringKnob kDump("THESEUS_FLIGHT_RECORDER_DUMP", nullptr,
                       "Where the flight recorder is written when an operation fails (stall timeout, dead peer) "
                       "and at ncclCommAbort: a path, %r = rank, %p = pid, %c = communicator hash; unset: no files");
const BoolKnob kSigusr1("THESEUS_FLIGHT_RECORDER_SIGUSR1", false,
                        "1: SIGUSR1 writes every communicator's flight recorder to THESEUS_FLIGHT_RECORDER_DUMP");

const char* stateName(uint8_t s) {
  switch (s) {
    case 1: return "queued";
    case 2: return "running";
    case 3: return "done";
    case 4: return "failed";
    default: return "unknown";
  }
}

// Every live recorder, for SIGUSR1.
std::mutex registryMu;
std::set<const FlightRecorder*>& registry() {
  static auto* r = new std::set<const FlightRecorder*>();
  return *r;
}

int signalPipe[2] = {-1, -1};

void onSignal(int) {
  const char c = 1;
  if (signalPipe[1] >= 0) (void)!write(signalPipe[1], &c, 1);  // async-signal-safe; the thread does the rest
}

void signalThread() {
  for (;;) {
    char c;
    if (read(signalPipe[0], &c, 1) <= 0) continue;
    std::lock_guard lock(registryMu);
    for (const FlightRecorder* r : registry()) {
      std::string path = r->dumpToFile("SIGUSR1");
      if (path.empty()) TH_WARN("SIGUSR1: THESEUS_FLIGHT_RECORDER_DUMP is not set; the flight recorder is not written");
    }
  }
}

void installSignalOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!kSigusr1.get()) return;
    if (pipe2(signalPipe, O_CLOEXEC) != 0) return;
    std::thread(signalThread).detach();
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
    TH_INFO(log::kInit, "flight recorder: SIGUSR1 writes it to %s", kDump.get().c_str());
  });
}

}  // namespace

struct FlightRecorder::Entry {
  std::atomic<uint64_t> id{0};
  std::atomic<uint64_t> seq{0}, count{0}, bytes{0}, queuedNs{0}, startNs{0}, endNs{0};
  std::atomic<const char*> op{nullptr}, schedule{nullptr}, dtype{nullptr};
  std::atomic<int32_t> peer{-1};
  std::atomic<uint8_t> memory{0};  // device::MemoryKindMask
  std::atomic<uint8_t> state{0};
  std::atomic<bool> hasText{false};  // waiting or error is set
  std::string waiting;  // textMu_
  std::string error;    // textMu_
};

size_t FlightRecorder::configuredCapacity() {
  return static_cast<size_t>(std::clamp<int64_t>(kEntries.get(), 1, 65536));
}

FlightRecorder::FlightRecorder(Identity id, size_t capacity)
    : id_(id),
      createdNs_(nowNs()),
      capacity_(std::max<size_t>(capacity, 1)),
      ringMask_(std::bit_ceil(capacity_) - 1),
      ring_(new Entry[ringMask_ + 1]) {
  installSignalOnce();
  std::lock_guard lock(registryMu);
  registry().insert(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard lock(registryMu);
  registry().erase(this);
}

void FlightRecorder::attach(Context context) { context_ = std::move(context); }

// The ring holds a power of two of entries (a mask, not a division, per operation); dumps
// report the last capacity_ of them.
FlightRecorder::Entry* FlightRecorder::slot(uint64_t id) const { return &ring_[(id - 1) & ringMask_]; }

uint64_t FlightRecorder::queued(uint64_t seq, const char* op, const char* schedule, uint64_t count, const char* dtype,
                                uint64_t bytes, int peer, uint8_t memory) {
  const uint64_t id = next_.load(std::memory_order_relaxed) + 1;
  Entry* e = slot(id);
  e->id.store(0, std::memory_order_relaxed);  // being rewritten
  std::atomic_thread_fence(std::memory_order_release);
  e->seq.store(seq, std::memory_order_relaxed);
  e->op.store(op, std::memory_order_relaxed);
  e->schedule.store(schedule, std::memory_order_relaxed);
  e->count.store(count, std::memory_order_relaxed);
  e->dtype.store(dtype, std::memory_order_relaxed);
  e->bytes.store(bytes, std::memory_order_relaxed);
  e->peer.store(peer, std::memory_order_relaxed);
  e->memory.store(memory, std::memory_order_relaxed);
  e->queuedNs.store(0, std::memory_order_relaxed);  // set when it starts (no clock read here)
  e->startNs.store(0, std::memory_order_relaxed);
  e->endNs.store(0, std::memory_order_relaxed);
  e->state.store(static_cast<uint8_t>(State::kQueued), std::memory_order_relaxed);
  if (e->hasText.load(std::memory_order_acquire)) {
    std::lock_guard lock(textMu_);
    e->waiting.clear();
    e->error.clear();
    e->hasText.store(false, std::memory_order_relaxed);
  }
  e->id.store(id, std::memory_order_release);
  next_.store(id, std::memory_order_release);
  return id;
}

void FlightRecorder::started(uint64_t id, uint64_t now) {
  Entry* e = slot(id);
  if (id == 0 || e->id.load(std::memory_order_relaxed) != id) return;
  e->queuedNs.store(now, std::memory_order_relaxed);  // lowered just before it starts
  e->startNs.store(now, std::memory_order_relaxed);
  e->state.store(static_cast<uint8_t>(State::kRunning), std::memory_order_release);
}

void FlightRecorder::done(uint64_t id, uint64_t endNs) {
  Entry* e = slot(id);
  if (id == 0 || e->id.load(std::memory_order_relaxed) != id) return;
  e->endNs.store(endNs, std::memory_order_relaxed);
  e->state.store(static_cast<uint8_t>(State::kDone), std::memory_order_release);
}

void FlightRecorder::failedAll(const std::string& why) {
  const uint64_t last = next_.load(std::memory_order_acquire);
  std::lock_guard lock(textMu_);
  for (uint64_t id = last; id > 0 && last - id < capacity_; --id) {
    Entry* e = slot(id);
    const uint8_t s = e->state.load(std::memory_order_relaxed);
    if (s == static_cast<uint8_t>(State::kDone) || s == static_cast<uint8_t>(State::kFailed)) continue;
    e->error = why;
    e->hasText.store(true, std::memory_order_release);
    e->endNs.store(nowNs(), std::memory_order_relaxed);
    e->state.store(static_cast<uint8_t>(State::kFailed), std::memory_order_release);
  }
}

void FlightRecorder::waiting(uint64_t id, const std::string& what) {
  Entry* e = slot(id);
  if (id == 0 || e->id.load(std::memory_order_relaxed) != id) return;
  std::lock_guard lock(textMu_);
  e->waiting = what;
  e->hasText.store(true, std::memory_order_release);
}

std::string FlightRecorder::json(const std::string& reason) const {
  char hash[24], host[256] = {};
  snprintf(hash, sizeof(hash), "%016" PRIx64, id_.commHash);
  gethostname(host, sizeof(host) - 1);
  nlohmann::json entries = nlohmann::json::array();
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  {
    std::lock_guard lock(textMu_);
    for (uint64_t id = first; id <= last && id > 0; ++id) {
      const Entry* e = slot(id);
      if (e->id.load(std::memory_order_acquire) != id) continue;  // being rewritten
      const char* op = e->op.load(std::memory_order_relaxed);
      const char* schedule = e->schedule.load(std::memory_order_relaxed);
      const char* dtype = e->dtype.load(std::memory_order_relaxed);
      nlohmann::json j = {{"id", id},
                          {"seq", e->seq.load(std::memory_order_relaxed)},
                          {"op", op != nullptr ? op : ""},
                          {"schedule", schedule != nullptr ? schedule : ""},
                          {"count", e->count.load(std::memory_order_relaxed)},
                          {"dtype", dtype != nullptr ? dtype : ""},
                          {"bytes", e->bytes.load(std::memory_order_relaxed)},
                          {"peer", e->peer.load(std::memory_order_relaxed)},
                          {"state", stateName(e->state.load(std::memory_order_acquire))},
                          {"queued_ns", e->queuedNs.load(std::memory_order_relaxed)},
                          {"start_ns", e->startNs.load(std::memory_order_relaxed)},
                          {"end_ns", e->endNs.load(std::memory_order_relaxed)}};
      if (const uint8_t memory = e->memory.load(std::memory_order_relaxed); memory != 0) addMemory(memory, &j);
      if (!e->waiting.empty()) j["waiting"] = e->waiting;
      if (!e->error.empty()) j["error"] = e->error;
      if (e->id.load(std::memory_order_acquire) == id) entries.push_back(std::move(j));
    }
  }
  nlohmann::json out = {{"format", 1},      {"rank", id_.rank}, {"nranks", id_.nranks}, {"comm", hash},
                        {"host", host},     {"pid", getpid()},  {"reason", reason},     {"now_ns", nowNs()},
                        {"created_ns", createdNs_}, {"entries", entries}};
  addContext(&out);
  return out.dump(1);
}

// An entry's "memory" (its buffers' kinds) and "executor" (what runs such an operation on this communicator,
// computed here rather than recorded per operation: it follows from the two).
void FlightRecorder::addMemory(uint8_t memory, nlohmann::json* entry) const {
  std::string kinds;
  for (device::MemoryKind k : {device::MemoryKind::kHost, device::MemoryKind::kHostPinned, device::MemoryKind::kDevice})
    if ((memory & device::maskOf(k)) != 0) kinds += (kinds.empty() ? "" : "+") + std::string(device::memoryKindName(k));
  (*entry)["memory"] = kinds;
  Result<exec::Executor*> e = exec::executorFor(memory, context_.deviceExecutor);
  (*entry)["executor"] = e.isOk() ? e.value()->name() : "none";
}

// The host of every rank, the transport counters of every peer that carried traffic, and the
// rank's attributes (the doctor's evidence for slow links, hosts and stragglers).
void FlightRecorder::addContext(nlohmann::json* out) const {
  if (!context_.hostOf.empty()) (*out)["host_of"] = context_.hostOf;
  if (context_.transports != nullptr) {
    nlohmann::json peers = nlohmann::json::array();
    for (int p = 0; p < id_.nranks; ++p) {
      if (p == id_.rank) continue;
      const transport::PeerStats st = context_.transports->stats(p);
      if (st.bytesSent == 0 && st.bytesReceived == 0) continue;
      peers.push_back({{"peer", p},
                       {"bytes_sent", st.bytesSent},
                       {"send_busy_ns", st.sendBusyNs},
                       {"link_busy_ns", st.linkBusyNs},
                       {"bytes_received", st.bytesReceived},
                       {"recv_wait_ns", st.recvWaitNs}});
    }
    (*out)["peers"] = std::move(peers);
  }
  if (context_.attributes != nullptr) {
    attrs::Snapshot snap = context_.attributes->snapshot();
    snap.rank = id_.rank;
    nlohmann::json a = nlohmann::json::parse(snap.serialize(), nullptr, false);
    if (!a.is_discarded()) (*out)["attributes"] = std::move(a);
  }
}

std::string FlightRecorder::dumpToFile(const std::string& reason) const {
  const std::string spec = kDump.get();
  if (spec.empty()) return "";
  const std::string path = expandPathTemplate(spec, id_.rank, id_.commHash);
  const std::string text = json(reason) + "\n";
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr || fwrite(text.data(), 1, text.size(), f) != text.size() || fclose(f) != 0) {
    TH_WARN("flight recorder: cannot write %s: %s", tmp.c_str(), strerror(errno));
    return "";
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    TH_WARN("flight recorder: cannot write %s: %s", path.c_str(), strerror(errno));
    return "";
  }
  TH_INFO(log::kInit, "flight recorder of rank %d written to %s (%s)", id_.rank, path.c_str(), reason.c_str());
  return path;
}

}  // namespace theseus::telemetry
