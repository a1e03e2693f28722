#include "telemetry/nccl_profiler.h"

#include <cstring>
#include <mutex>

#include "common/knobs.h"
#include "common/log.h"
#include "common/nccl_plugins.h"

namespace theseus::telemetry {
namespace {

const StringKnob kProfilerPlugin("NCCL_PROFILER_PLUGIN", nullptr,
                                 "NCCL profiler plugin to load (NCCL's rules: a name or path, then "
                                 "libnccl-profiler-<name>.so; 'none' disables; unset tries libnccl-profiler.so); "
                                 "events Theseus emits are listed in docs/plugin-guide.md");
const IntKnob kProfileEventMask("NCCL_PROFILE_EVENT_MASK", 0,
                                "Initial event activation mask handed to the profiler plugin's init() "
                                "(ncclProfile* bits); the plugin may change it");

const char* const kKnown[] = {"ncclProfiler_v6", "ncclProfiler_v5"};
const char* const kNewer[] = {"ncclProfiler_v7", "ncclProfiler_v8"};
const char* const kOlder[] = {"ncclProfiler_v4", "ncclProfiler_v3", "ncclProfiler_v2", "ncclProfiler_v1"};

}  // namespace

// A loaded library, shared by every session of the process that uses the same value.
struct ProfilerSession::Plugin {
  std::unique_ptr<plugin::Library> library;
  const ncclProfiler_v6_t* table = nullptr;
  int version = 0;
  std::string name;
  std::string value;
};

namespace {

std::mutex gLoadMutex;
std::weak_ptr<ProfilerSession::Plugin>& cached() {
  static std::weak_ptr<ProfilerSession::Plugin> p;
  return p;
}

}  // namespace

Result<std::unique_ptr<ProfilerSession>> ProfilerSession::open(const Identity& who) {
  return open(kProfilerPlugin.get(), kProfilerPlugin.isSet(), who);
}

Result<std::unique_ptr<ProfilerSession>> ProfilerSession::open(const std::string& value, const Identity& who) {
  return open(value, true, who);
}

Result<std::unique_ptr<ProfilerSession>> ProfilerSession::open(const std::string& value, bool set,
                                                               const Identity& who) {
  std::shared_ptr<Plugin> p;
  {
    std::lock_guard<std::mutex> lock(gLoadMutex);
    p = cached().lock();
    if (!p || p->value != value) {
      plugin::NcclPluginLookup lookup{"profiler plugin", "libnccl-profiler", "NCCL_PROFILER_PLUGIN", value, set};
      TH_ASSIGN(plugin::NcclPluginLibrary found, plugin::openNcclPlugin(lookup));
      if (!found.library) return std::unique_ptr<ProfilerSession>();
      auto fresh = std::make_shared<Plugin>();
      fresh->library = std::move(found.library);
      fresh->value = value;
      auto sym = fresh->library->findVersioned(kKnown, kNewer);
      if (!sym.isOk() && found.optional) {
        // A candidate (libnccl-profiler.so with the variable unset, NCCL_NET_PLUGIN's library) that is no profiler.
        TH_INFO(log::kInit | log::kProfile, "%s; no NCCL profiler plugin", sym.status().message().c_str());
        return std::unique_ptr<ProfilerSession>();
      }
      if (!sym.isOk()) {
        for (const char* old : kOlder)
          if (fresh->library->find(old) != nullptr)
            return invalidArgument("%s: exports %s, an older profiler plugin ABI than Theseus reads (ncclProfiler_v6 "
                                   "or ncclProfiler_v5); rebuild the plugin against NCCL 2.28 or newer headers",
                                   fresh->library->path().c_str(), old);
        return sym.status();
      }
      fresh->table = static_cast<const ncclProfiler_v6_t*>(sym.value().address);
      fresh->version = 6 - static_cast<int>(sym.value().index);
      const ncclProfiler_v6_t* t = fresh->table;
      if (t->name == nullptr || t->name[0] == '\0' || strnlen(t->name, 129) > 128)
        return invalidArgument("%s: %s has no name (1..128 characters)", fresh->library->path().c_str(),
                               sym.value().name);
      fresh->name = t->name;
      if (!t->init || !t->startEvent || !t->stopEvent || !t->recordEventState || !t->finalize)
        return invalidArgument("%s: profiler plugin '%s' (%s): a required function is NULL", fresh->library->path().c_str(),
                               t->name, sym.value().name);
      TH_INFO(log::kInit | log::kProfile, "NCCL profiler plugin '%s' v%d (%s) loaded", fresh->name.c_str(),
              fresh->version, fresh->library->path().c_str());
      cached() = fresh;
      p = fresh;
    }
  }
  std::unique_ptr<ProfilerSession> s(new ProfilerSession());
  s->plugin_ = p;
  s->rank_ = who.rank;
  int mask = static_cast<int>(kProfileEventMask.get());
  ncclResult_t r;
  {
    plugin::CallScope scope(p->name.c_str());
    r = p->table->init(&s->context_, who.commId, &mask, who.commName.c_str(), who.nnodes, who.nranks, who.rank,
                       plugin::ncclPluginLogger);
  }
  if (r != ncclSuccess) {
    s->plugin_.reset();  // nothing to finalize
    return invalidArgument("%s: profiler plugin '%s': init() failed with %d (%s)", p->library->path().c_str(),
                           p->name.c_str(), static_cast<int>(r), resultName(r));
  }
  s->mask_ = mask;
  TH_INFO(log::kProfile, "NCCL profiler plugin '%s': rank %d enables events %#x", p->name.c_str(), who.rank, mask);
  if (mask == 0) return std::unique_ptr<ProfilerSession>();  // finalized by the destructor
  return s;
}

ProfilerSession::~ProfilerSession() {
  if (!plugin_) return;
  plugin::CallScope scope(plugin_->name.c_str());
  ncclResult_t r = plugin_->table->finalize(context_);
  if (r != ncclSuccess)
    TH_WARN("profiler plugin '%s': finalize() failed with %d", plugin_->name.c_str(), static_cast<int>(r));
}

const std::string& ProfilerSession::pluginName() const { return plugin_->name; }

void* ProfilerSession::start(ncclProfilerEventDescr_v6_t& d) {
  if (!wants(d.type)) return nullptr;
  d.rank = rank_;
  void* handle = nullptr;
  ncclResult_t r;
  {
    plugin::CallScope scope(plugin_->name.c_str());
    r = plugin_->table->startEvent(context_, &handle, &d);
  }
  if (r != ncclSuccess) {
    if (!warned_) TH_WARN("profiler plugin '%s': startEvent(type %#llx) failed with %d; the event is dropped",
                          plugin_->name.c_str(), static_cast<unsigned long long>(d.type), static_cast<int>(r));
    warned_ = true;
    return nullptr;
  }
  return handle;
}

void ProfilerSession::stop(void* handle) {
  if (handle == nullptr) return;
  plugin::CallScope scope(plugin_->name.c_str());
  (void)plugin_->table->stopEvent(handle);
}

void ProfilerSession::record(void* handle, ncclProfilerEventState_v6_t state, ncclProfilerEventStateArgs_v6_t* args) {
  if (handle == nullptr) return;
  plugin::CallScope scope(plugin_->name.c_str());
  (void)plugin_->table->recordEventState(handle, state, args);
}

}  // namespace theseus::telemetry
