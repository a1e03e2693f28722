// The attribute and policy part of Theseus' extension API
// (include/theseus/theseus.h): runtime attributes of a communicator's rank, and
// checking a policy spec without a communicator.
#include <nlohmann/json.hpp>

#include "api/guard.h"
#include "comm/communicator.h"
#include "common/deadline.h"
#include "policy/policy.h"
#include "theseus/theseus.h"

using theseus::Status;

namespace {

theseus::Result<theseus::attrs::AttributeStore*> storeOf(ncclComm_t comm) {
  TH_ASSIGN(theseus::comm::Communicator * c, theseus::comm::fromHandle(comm));
  c->attributes().setRank(c->rank());
  return &c->attributes();
}

Status checkedName(const char* name) {
  if (name == nullptr) return theseus::invalidArgument("name is NULL");
  return theseus::attrs::checkName(name);
}

}  // namespace

THESEUS_API(ncclResult_t, theseusSetAttribute, ncclComm_t comm, const char* name, double value) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::attrs::AttributeStore * store, storeOf(comm));
    TH_CHECK(checkedName(name));
    return store->set(name, value, theseus::attrs::Source::kApi);
  });
}

THESEUS_API(ncclResult_t, theseusClearAttribute, ncclComm_t comm, const char* name) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::attrs::AttributeStore * store, storeOf(comm));
    TH_CHECK(checkedName(name));
    store->clear(name);
    return Status::ok();
  });
}

THESEUS_API(ncclResult_t, theseusGetAttribute, ncclComm_t comm, const char* name, double* value, int* isSet) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::attrs::AttributeStore * store, storeOf(comm));
    TH_CHECK(checkedName(name));
    if (value == nullptr || isSet == nullptr) return theseus::invalidArgument("value or isSet is NULL");
    auto a = store->get(name);
    *isSet = a ? 1 : 0;
    if (a) *value = a->value;
    return Status::ok();
  });
}

THESEUS_API(ncclResult_t, theseusListAttributes, ncclComm_t comm, char* buffer, size_t size, size_t* needed) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::attrs::AttributeStore * store, storeOf(comm));
    const uint64_t now = theseus::nowNs();
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [name, a] : store->list()) {
      double ageMs = now > a.timestampNs ? static_cast<double>(now - a.timestampNs) / 1e6 : 0.0;
      attrs[name] = {{"value", a.value}, {"source", theseus::attrs::sourceName(a.source)}, {"age_ms", ageMs}};
    }
    nlohmann::json j = {{"version", 1}, {"rank", store->rank()}, {"attributes", std::move(attrs)}};
    return theseus::api::copyOut(j.dump(), buffer, size, needed);
  });
}

THESEUS_API(ncclResult_t, theseusCheckPolicy, const char* spec, char* message, size_t messageSize) {
  return TH_API_GUARD({
    if (spec == nullptr) return theseus::invalidArgument("spec is NULL");
    if (message == nullptr && messageSize > 0) return theseus::invalidArgument("message is NULL but messageSize > 0");
    auto policy = theseus::policy::load(spec);
    std::string text = policy.isOk() ? policy.value()->describe() : policy.status().message();
    size_t needed;
    TH_CHECK(theseus::api::copyOut(text, message, messageSize, &needed));
    return policy.status();
  });
}
