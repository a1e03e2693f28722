// NCCL 2.30's parameter API over Theseus' configuration registry
// (common/knobs.h): every THESEUS_* knob and every NCCL_* variable Theseus
// reads, with the value in effect (the environment, after NCCL's config
// files, else the default).
//
// Keys. NCCL names its parameters without the "NCCL_" prefix
// ("SOCKET_NTHREADS" is NCCL_SOCKET_NTHREADS); Theseus' own knobs keep their
// full name ("THESEUS_SLICE_BYTES"). A key with the prefix is accepted too.
// Handles (ncclParamBind) stay valid for the life of the process.
//
// Types. The integer getters read integer and boolean parameters, and string
// parameters whose value is an integer (NCCL_COMM_BLOCKING); a value that
// does not fit the getter's type, a non-integer, or a parameter without a
// value is ncclInvalidArgument. ncclParamGetStr, ncclParamGet and
// ncclParamGetParameter give the value as text for every type. As in NCCL,
// returned strings live in thread-local storage until the next call of the
// same function on that thread.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/guard.h"
#include "common/knobs.h"

using theseus::KnobInfo;
using theseus::KnobType;
using theseus::Status;

struct ncclParamHandle {
  const KnobInfo* info;
};

namespace {

// "SOCKET_NTHREADS" -> NCCL_SOCKET_NTHREADS; "THESEUS_X" and "NCCL_X" as given.
const KnobInfo* knobForKey(const char* key) {
  if (const KnobInfo* k = theseus::findKnob(key)) return k;
  return theseus::findKnob(("NCCL_" + std::string(key)).c_str());
}

// The key NCCL would use for a knob.
std::string keyOf(const KnobInfo& k) {
  const std::string name = k.name;
  return name.rfind("NCCL_", 0) == 0 ? name.substr(5) : name;
}

theseus::Result<ncclParamHandle_t> bind(const char* key) {
  static std::mutex mu;
  static auto* handles = new std::map<const KnobInfo*, std::unique_ptr<ncclParamHandle>>;
  const KnobInfo* k = knobForKey(key);
  if (k == nullptr)
    return theseus::invalidArgument("ncclParamBind: no parameter '%s' (ncclParamGetAllParameterKeys lists them)", key);
  std::lock_guard<std::mutex> lock(mu);
  auto& h = (*handles)[k];
  if (!h) h = std::make_unique<ncclParamHandle>(ncclParamHandle{k});
  return h.get();
}

theseus::Result<std::string> valueText(ncclParamHandle_t h) {
  if (h == nullptr || h->info == nullptr) return theseus::invalidArgument("the parameter handle is NULL");
  auto v = theseus::knobValueText(*h->info);
  if (!v) return theseus::invalidArgument("parameter %s has no value (unset, and it has no default)", h->info->name);
  return *v;
}

template <typename T>
Status getInteger(ncclParamHandle_t h, T* out, const char* getter) {
  if (out == nullptr) return theseus::invalidArgument("%s: out is NULL", getter);
  std::string text;
  TH_ASSIGN(text, valueText(h));
  int64_t v;
  if (h->info->type == KnobType::kBool) {
    auto b = theseus::parseBool(text.c_str());
    if (!b) return theseus::invalidArgument("%s: %s='%s' is not a boolean", getter, h->info->name, text.c_str());
    v = *b ? 1 : 0;
  } else if (h->info->type == KnobType::kDouble) {
    return theseus::invalidArgument("%s: %s is a floating-point parameter; use ncclParamGetStr", getter, h->info->name);
  } else {
    auto parsed = theseus::parseIntWithSuffix(text.c_str());
    if (!parsed)
      return theseus::invalidArgument("%s: %s='%s' is not an integer; use ncclParamGetStr", getter, h->info->name,
                                      text.c_str());
    v = *parsed;
  }
  const bool fits = std::numeric_limits<T>::is_signed
                        ? v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              v <= static_cast<int64_t>(std::numeric_limits<T>::max())
                        : v >= 0 && static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (!fits) return theseus::invalidArgument("%s: %s=%" PRId64 " does not fit the type", getter, h->info->name, v);
  *out = static_cast<T>(v);
  return Status::ok();
}

}  // namespace

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key) {
  return TH_API_GUARD({
    if (out == nullptr) return theseus::invalidArgument("ncclParamBind: out is NULL");
    if (key == nullptr) return theseus::invalidArgument("ncclParamBind: key is NULL");
    TH_ASSIGN(*out, bind(key));
    return Status::ok();
  });
}

#define THESEUS_PARAM_GETTER(Suffix, T)                                                     \
  NCCL_API(ncclResult_t, ncclParamGet##Suffix, ncclParamHandle_t handle, T* out) {          \
    return TH_API_GUARD({ return getInteger<T>(handle, out, "ncclParamGet" #Suffix); });    \
  }
THESEUS_PARAM_GETTER(I8, int8_t)
THESEUS_PARAM_GETTER(I16, int16_t)
THESEUS_PARAM_GETTER(I32, int32_t)
THESEUS_PARAM_GETTER(I64, int64_t)
THESEUS_PARAM_GETTER(U8, uint8_t)
THESEUS_PARAM_GETTER(U16, uint16_t)
THESEUS_PARAM_GETTER(U32, uint32_t)
THESEUS_PARAM_GETTER(U64, uint64_t)
#undef THESEUS_PARAM_GETTER

NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t handle, const char** out) {
  return TH_API_GUARD({
    if (out == nullptr) return theseus::invalidArgument("ncclParamGetStr: out is NULL");
    static thread_local std::string buffer;
    TH_ASSIGN(buffer, valueText(handle));
    *out = buffer.c_str();
    return Status::ok();
  });
}

// Copies the value's text, NUL included, into `out` (at most maxLen bytes,
// always terminated when maxLen > 0); *len is the size the whole text needs.
NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t handle, void* out, int maxLen, int* len) {
  return TH_API_GUARD({
    if (len == nullptr) return theseus::invalidArgument("ncclParamGet: len is NULL");
    if (maxLen < 0 || (maxLen > 0 && out == nullptr))
      return theseus::invalidArgument("ncclParamGet: out %p with maxLen %d is invalid", out, maxLen);
    std::string text;
    TH_ASSIGN(text, valueText(handle));
    *len = static_cast<int>(text.size() + 1);
    if (maxLen > 0) {
      size_t n = std::min(static_cast<size_t>(maxLen - 1), text.size());
      memcpy(out, text.data(), n);
      static_cast<char*>(out)[n] = '\0';
    }
    return Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen) {
  return TH_API_GUARD({
    if (key == nullptr || value == nullptr || valueLen == nullptr)
      return theseus::invalidArgument("ncclParamGetParameter: key, value and valueLen must not be NULL");
    ncclParamHandle_t h;
    TH_ASSIGN(h, bind(key));
    static thread_local std::string buffer;
    TH_ASSIGN(buffer, valueText(h));
    *value = buffer.c_str();
    *valueLen = static_cast<int>(buffer.size());
    return Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen) {
  return TH_API_GUARD({
    if (table == nullptr || tableLen == nullptr)
      return theseus::invalidArgument("ncclParamGetAllParameterKeys: table and tableLen must not be NULL");
    static thread_local std::vector<std::string> keys;
    static thread_local std::vector<const char*> pointers;
    keys.clear();
    pointers.clear();
    for (const KnobInfo* k : theseus::allKnobs()) keys.push_back(keyOf(*k));
    for (const auto& k : keys) pointers.push_back(k.c_str());
    *table = pointers.data();
    *tableLen = static_cast<int>(pointers.size());
    return Status::ok();
  });
}

// One line per parameter: key, value in effect, default, help.
NCCL_API(void, ncclParamDumpAll) {
  for (const KnobInfo* k : theseus::allKnobs()) {
    auto v = theseus::knobValueText(*k);
    printf("%s = %s (default %s): %s\n", keyOf(*k).c_str(), v ? v->c_str() : "<unset>",
           k->defaultText.empty() ? "<none>" : k->defaultText.c_str(), k->help);
  }
  fflush(stdout);
}
