// The attribute and policy part of the extension API (include/theseus/theseus.h).
// These entry points live here rather than in src/api so that the unit tests,
// which link the core library without src/api, can call them too; they follow
// the same rules: no exception crosses the C ABI, an error becomes the return
// code plus a WARN (and the ncclGetLastError() text).
#include <cstring>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "common/deadline.h"
#include "common/log.h"
#include "policy/policy.h"
#include "common/c_boundary.h"
#include "theseus/theseus.h"

#define THESEUS_EXPORT extern "C" __attribute__((visibility("default")))

namespace theseus::policy {
namespace {

Result<attrs::AttributeStore*> storeOf(ncclComm_t comm) {
  TH_ASSIGN(comm::Communicator * c, comm::fromHandle(comm));
  c->attributes().setRank(c->rank());
  return &c->attributes();
}

Status checkedName(const char* name) {
  if (name == nullptr) return invalidArgument("name is NULL");
  return attrs::checkName(name);
}

// snprintf-like: *needed = strlen(text) + 1, truncated copy when it does not fit.
Status copyOut(const std::string& text, char* buffer, size_t size, size_t* needed) {
  if (needed == nullptr) return invalidArgument("needed is NULL");
  if (buffer == nullptr && size > 0) return invalidArgument("buffer is NULL but size is %zu", size);
  *needed = text.size() + 1;
  if (size > 0) {
    size_t n = std::min(size - 1, text.size());
    memcpy(buffer, text.data(), n);
    buffer[n] = 0;
  }
  return Status::ok();
}

}  // namespace
}  // namespace theseus::policy

using theseus::Status;
namespace pol = theseus::policy;

THESEUS_EXPORT ncclResult_t theseusSetAttribute(ncclComm_t comm, const char* name, double value) {
  return theseus::cBoundary(__func__, [&]() -> Status {
    TH_ASSIGN(theseus::attrs::AttributeStore * store, pol::storeOf(comm));
    TH_CHECK(pol::checkedName(name));
    return store->set(name, value, theseus::attrs::Source::kApi);
  });
}

THESEUS_EXPORT ncclResult_t theseusClearAttribute(ncclComm_t comm, const char* name) {
  return theseus::cBoundary(__func__, [&]() -> Status {
    TH_ASSIGN(theseus::attrs::AttributeStore * store, pol::storeOf(comm));
    TH_CHECK(pol::checkedName(name));
    store->clear(name);
    return Status::ok();
  });
}

THESEUS_EXPORT ncclResult_t theseusGetAttribute(ncclComm_t comm, const char* name, double* value, int* isSet) {
  return theseus::cBoundary(__func__, [&]() -> Status {
    TH_ASSIGN(theseus::attrs::AttributeStore * store, pol::storeOf(comm));
    TH_CHECK(pol::checkedName(name));
    if (value == nullptr || isSet == nullptr) return theseus::invalidArgument("value or isSet is NULL");
    auto a = store->get(name);
    *isSet = a ? 1 : 0;
    if (a) *value = a->value;
    return Status::ok();
  });
}

THESEUS_EXPORT ncclResult_t theseusListAttributes(ncclComm_t comm, char* buffer, size_t size, size_t* needed) {
  return theseus::cBoundary(__func__, [&]() -> Status {
    TH_ASSIGN(theseus::attrs::AttributeStore * store, pol::storeOf(comm));
    const uint64_t now = theseus::nowNs();
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [name, a] : store->list()) {
      double ageMs = now > a.timestampNs ? static_cast<double>(now - a.timestampNs) / 1e6 : 0.0;
      attrs[name] = {{"value", a.value}, {"source", theseus::attrs::sourceName(a.source)}, {"age_ms", ageMs}};
    }
    nlohmann::json j = {{"version", 1}, {"rank", store->rank()}, {"attributes", std::move(attrs)}};
    return pol::copyOut(j.dump(), buffer, size, needed);
  });
}

THESEUS_EXPORT ncclResult_t theseusCheckPolicy(const char* spec, char* message, size_t messageSize) {
  return theseus::cBoundary(__func__, [&]() -> Status {
    if (spec == nullptr) return theseus::invalidArgument("spec is NULL");
    if (message == nullptr && messageSize > 0) return theseus::invalidArgument("message is NULL but messageSize > 0");
    auto policy = pol::load(spec);
    std::string text = policy.isOk() ? policy.value()->describe() : policy.status().message();
    size_t needed;
    TH_CHECK(pol::copyOut(text, message, messageSize, &needed));
    return policy.status();
  });
}
