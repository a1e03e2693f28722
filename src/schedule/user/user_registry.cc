// Loading user schedules by file type, the name registry, and the process-wide
// registry filled from THESEUS_SCHEDULES (user_schedules.h).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/knobs.h"
#include "common/log.h"
#include "schedule/user/json_schedule.h"
#include "schedule/user/msccl_import.h"
#include "schedule/user/plugin_schedule.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {
namespace {

const StringKnob kSchedules("THESEUS_SCHEDULES", "",
                            "User schedules to load: files or directories (',' or ':' separated) of *.json schedules, "
                            "*.xml MSCCL algorithms and *.so schedule plugins (docs/schedule-format.md)");

enum class FileType { kJson, kXml, kPlugin, kOther };

FileType fileType(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.ends_with(".json")) return FileType::kJson;
  if (base.ends_with(".xml")) return FileType::kXml;
  if (base.ends_with(".so") || base.find(".so.") != std::string::npos) return FileType::kPlugin;
  return FileType::kOther;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Schedule files of a directory, sorted by name (hidden files skipped).
Result<std::vector<std::string>> listDirectory(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return invalidArgument("%s: cannot open directory: %s", dir.c_str(), strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    if (fileType(name) != FileType::kOther) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::string prefix = dir.ends_with("/") ? dir : dir + "/";
  for (std::string& n : names) n = prefix + n;
  return names;
}

// "file:/x.json" or anything with a '/' names a file.
bool nameIsPath(const std::string& name, std::string* path) {
  if (name.rfind("file:", 0) == 0) {
    *path = name.substr(5);
    return true;
  }
  if (name.find('/') != std::string::npos) {
    *path = name;
    return true;
  }
  return false;
}

}  // namespace

const char* sourceKindName(SourceKind k) {
  switch (k) {
    case SourceKind::kJson: return "json";
    case SourceKind::kMscclXml: return "msccl-xml";
    case SourceKind::kPlugin: return "plugin";
  }
  return "unknown";
}

const char* layoutName(Layout l) {
  switch (l) {
    case Layout::kOutOfPlace: return "out-of-place";
    case Layout::kInPlace: return "in-place";
    case Layout::kBoth: return "both";
  }
  return "unknown";
}

Status checkScheduleName(const std::string& name) {
  if (name.empty() || name.size() > 128)
    return invalidArgument("schedule name '%s' must have 1..128 characters", name.c_str());
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    if (!ok)
      return invalidArgument("schedule name '%s' contains '%c' (allowed: letters, digits, '_', '.', '-')",
                             name.c_str(), c);
  }
  if (isBuiltin(name)) return invalidArgument("schedule name '%s' is taken by a built-in schedule", name.c_str());
  return Status::ok();
}

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Result<ScheduleHandle> loadFile(const std::string& path) {
  switch (fileType(path)) {
    case FileType::kJson: {
      TH_ASSIGN(std::shared_ptr<FixedSchedule> s, loadJsonSchedule(path));
      return ScheduleHandle(std::move(s));
    }
    case FileType::kXml: {
      TH_ASSIGN(std::shared_ptr<FixedSchedule> s, loadMscclXml(path));
      return ScheduleHandle(std::move(s));
    }
    case FileType::kPlugin: {
      TH_ASSIGN(std::shared_ptr<PluginSchedule> s, loadSchedulePlugin(path));
      return ScheduleHandle(std::move(s));
    }
    case FileType::kOther: break;
  }
  return invalidArgument("%s: unknown schedule file type (expected .json, .xml or .so)", path.c_str());
}

Status Registry::add(ScheduleHandle schedule) {
  const std::string& name = schedule->name();
  TH_CHECK(checkScheduleName(name).withContext(schedule->info().path));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = byName_.find(name);
  if (it != byName_.end())
    return invalidArgument("%s: schedule name '%s' is already taken by %s (the first one stays)",
                           schedule->info().path.c_str(), name.c_str(), it->second->info().path.c_str());
  byName_.emplace(name, schedule);
  order_.push_back(std::move(schedule));
  return Status::ok();
}

Status Registry::addFile(const std::string& path) {
  Result<ScheduleHandle> loaded = loadFile(path);
  if (!loaded.isOk()) return loaded.status();
  return add(loaded.take());
}

std::vector<Status> Registry::addSpec(const std::string& spec) {
  std::vector<Status> errors;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t sep = spec.find_first_of(",:", pos);
    std::string entry = trim(spec.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos));
    pos = sep == std::string::npos ? spec.size() + 1 : sep + 1;
    if (entry.empty()) continue;
    struct stat st;
    if (stat(entry.c_str(), &st) != 0) {
      errors.push_back(invalidArgument("%s: %s", entry.c_str(), strerror(errno)));
      continue;
    }
    std::vector<std::string> files;
    if (S_ISDIR(st.st_mode)) {
      Result<std::vector<std::string>> listed = listDirectory(entry);
      if (!listed.isOk()) {
        errors.push_back(listed.status());
        continue;
      }
      files = listed.take();
    } else {
      files.push_back(entry);
    }
    for (const std::string& f : files) {
      Status st2 = addFile(f);
      if (!st2.isOk()) errors.push_back(st2);
    }
  }
  return errors;
}

Result<ScheduleHandle> Registry::find(const std::string& name) const {
  std::string path;
  std::lock_guard<std::mutex> lock(mu_);
  if (nameIsPath(name, &path)) {
    auto it = byPath_.find(path);
    if (it == byPath_.end()) it = byPath_.emplace(path, loadFile(path)).first;
    return it->second;
  }
  auto it = byName_.find(name);
  if (it == byName_.end()) {
    std::string known;
    for (const ScheduleHandle& s : order_) known += (known.empty() ? "" : ", ") + s->name();
    return invalidArgument("unknown schedule '%s' (user schedules loaded from THESEUS_SCHEDULES: %s)", name.c_str(),
                           known.empty() ? "none" : known.c_str());
  }
  return it->second;
}

std::vector<ScheduleHandle> Registry::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_;
}

Registry& processRegistry() {
  static Registry* registry = [] {
    // Never destroyed: plugins stay loaded until the process exits.
    auto* r = new Registry();
    std::string spec = kSchedules.get();
    if (spec.empty()) return r;
    for (const Status& st : r->addSpec(spec)) TH_WARN("THESEUS_SCHEDULES: %s (skipped)", st.message().c_str());
    for (const ScheduleHandle& s : r->all())
      TH_INFO(log::kSchedule, "user schedule '%s' loaded from %s (%s)", s->name().c_str(), s->info().path.c_str(),
              sourceKindName(s->info().kind));
    return r;
  }();
  return *registry;
}

bool knows(const std::string& name) { return processRegistry().find(name).isOk(); }

bool supports(const std::string& name, Collective c, int nranks) {
  Result<ScheduleHandle> s = processRegistry().find(name);
  return s.isOk() && s.value()->supports(c, nranks);
}

bool serves(const std::string& name, const GenerateRequest& req) {
  Result<ScheduleHandle> s = processRegistry().find(name);
  return s.isOk() && s.value()->serves(req);
}

Result<Program> generate(const std::string& name, const GenerateRequest& req) {
  TH_ASSIGN(ScheduleHandle s, processRegistry().find(name));
  TH_ASSIGN(Program p, s->generate(req));
  TH_CHECK(checkRunnable(p));
  return p;
}

}  // namespace theseus::schedule::user
