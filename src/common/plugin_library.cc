#include "common/plugin_library.h"

#include <dlfcn.h>

#include "common/log.h"

namespace theseus::plugin {
namespace {

thread_local const char* tCurrentPlugin = nullptr;

}  // namespace

Result<std::unique_ptr<Library>> Library::open(const std::string& path, const char* what) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return invalidArgument("%s: cannot load %s: %s", path.c_str(), what, why ? why : "unknown dlopen error");
  }
  return std::unique_ptr<Library>(new Library(handle, path, what));
}

Result<std::unique_ptr<Library>> Library::openSelf(const char* what) {
  dlerror();
  void* handle = dlopen(nullptr, RTLD_NOW);
  if (handle == nullptr) return internalError("dlopen(NULL) failed for the %s: %s", what, dlerror());
  return std::unique_ptr<Library>(new Library(handle, "the process itself", what));
}

Library::~Library() {
  if (handle_ != nullptr) dlclose(handle_);
}

const void* Library::find(const char* symbol) const { return dlsym(handle_, symbol); }

Result<Library::Symbol> Library::findVersioned(std::span<const char* const> known,
                                               std::span<const char* const> newer) const {
  for (size_t i = 0; i < known.size(); ++i)
    if (const void* d = find(known[i])) return Symbol{d, known[i], i};
  const char* newest = known.empty() ? "?" : known[0];
  for (const char* sym : newer)
    if (find(sym) != nullptr)
      return invalidArgument("%s: exports %s, a newer %s ABI than this Theseus reads (%s)", path_.c_str(), sym, what_,
                             newest);
  return invalidArgument("%s: not a %s: symbol %s not found", path_.c_str(), what_, newest);
}

CallScope::CallScope(const char* name) : saved_(tCurrentPlugin) { tCurrentPlugin = name; }
CallScope::~CallScope() { tCurrentPlugin = saved_; }
const char* CallScope::current() { return tCurrentPlugin != nullptr ? tCurrentPlugin : "?"; }

void logFromPlugin(const char* what, uint64_t subsystem, int level, int warnLevel, int traceLevel,
                   const char* message) {
  const char* who = CallScope::current();
  const char* text = message != nullptr ? message : "(null)";
  if (level <= warnLevel) TH_WARN("%s '%s': %s", what, who, text);
  else if (level >= traceLevel) TH_TRACE(subsystem, "%s '%s': %s", what, who, text);
  else TH_INFO(subsystem, "%s '%s': %s", what, who, text);
}

}  // namespace theseus::plugin
