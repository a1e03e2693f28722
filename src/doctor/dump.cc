#include "doctor/dump.h"

namespace theseus::doctor {
namespace {

// Field readers: each fails with the JSON path and what was expected.
struct Reader {
  const std::string& source;
  std::string error;

  bool fail(const std::string& path, const char* expected, const nlohmann::json* got) {
    if (error.empty())
      error = source + ": " + path + ": expected " + expected +
              (got != nullptr ? ", got " + got->dump().substr(0, 40) : std::string(" (missing)"));
    return false;
  }
  const nlohmann::json* find(const nlohmann::json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  bool u64(const nlohmann::json& obj, const std::string& at, const char* key, uint64_t* out, bool required = true) {
    const nlohmann::json* v = find(obj, key);
    if (v == nullptr) return !required || fail(at + key, "an unsigned integer", nullptr);
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      return fail(at + key, "an unsigned integer", v);
    *out = v->get<uint64_t>();
    return true;
  }
  bool i32(const nlohmann::json& obj, const std::string& at, const char* key, int* out, int min, bool required = true) {
    const nlohmann::json* v = find(obj, key);
    if (v == nullptr) return !required || fail(at + key, "an integer", nullptr);
    if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > (1 << 30))
      return fail(at + key, min == 0 ? "a non-negative integer" : "an integer", v);
    *out = static_cast<int>(v->get<int64_t>());
    return true;
  }
  bool str(const nlohmann::json& obj, const std::string& at, const char* key, std::string* out, bool required = true) {
    const nlohmann::json* v = find(obj, key);
    if (v == nullptr) return !required || fail(at + key, "a string", nullptr);
    if (!v->is_string()) return fail(at + key, "a string", v);
    *out = v->get<std::string>();
    return true;
  }
};

bool parseOp(Reader& rd, const nlohmann::json& e, const std::string& at, DumpOp* o) {
  if (!e.is_object()) return rd.fail(at.substr(0, at.size() - 1), "an object", &e);
  bool ok = rd.u64(e, at, "seq", &o->seq) && rd.str(e, at, "op", &o->op) && rd.str(e, at, "state", &o->state) &&
            rd.str(e, at, "dtype", &o->dtype, false) && rd.u64(e, at, "count", &o->count, false) &&
            rd.u64(e, at, "start_ns", &o->startNs, false) && rd.u64(e, at, "end_ns", &o->endNs, false) &&
            rd.str(e, at, "waiting", &o->waiting, false) && rd.str(e, at, "error", &o->error, false) &&
            rd.str(e, at, "memory", &o->memory, false) && rd.str(e, at, "executor", &o->executor, false);
  if (!ok) return false;
  static const char* const kStates[] = {"queued", "running", "done", "failed", "unknown"};
  bool known = false;
  for (const char* s : kStates) known = known || o->state == s;
  if (!known) return rd.fail(at + "state", "queued, running, done or failed", &e["state"]);
  o->collective = o->op != "send/recv";
  return true;
}

bool parsePeers(Reader& rd, const nlohmann::json& j, RankDump* d) {
  const nlohmann::json* peers = rd.find(j, "peers");
  if (peers == nullptr) return true;
  if (!peers->is_array()) return rd.fail("peers", "an array", peers);
  for (size_t i = 0; i < peers->size(); ++i) {
    const nlohmann::json& p = (*peers)[i];
    const std::string at = "peers[" + std::to_string(i) + "].";
    if (!p.is_object()) return rd.fail(at.substr(0, at.size() - 1), "an object", &p);
    PeerCounters c;
    if (!rd.i32(p, at, "peer", &c.peer, 0) || !rd.u64(p, at, "bytes_sent", &c.bytesSent) ||
        !rd.u64(p, at, "send_busy_ns", &c.sendBusyNs) || !rd.u64(p, at, "link_busy_ns", &c.linkBusyNs, false) ||
        !rd.u64(p, at, "bytes_received", &c.bytesReceived) || !rd.u64(p, at, "recv_wait_ns", &c.recvWaitNs))
      return false;
    if (c.peer >= d->nranks) return rd.fail(at + "peer", "a rank below nranks", &p["peer"]);
    d->peers.push_back(c);
  }
  return true;
}

bool parseContext(Reader& rd, const nlohmann::json& j, RankDump* d) {
  if (const nlohmann::json* h = rd.find(j, "host_of")) {
    if (!h->is_array() || h->size() != static_cast<size_t>(d->nranks))
      return rd.fail("host_of", "an array of one host index per rank", h);
    for (size_t i = 0; i < h->size(); ++i) {
      const nlohmann::json& x = (*h)[i];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= d->nranks)
        return rd.fail("host_of[" + std::to_string(i) + "]", "a host index below nranks", &x);
      d->hostOf.push_back(static_cast<int>(x.get<int64_t>()));
    }
  }
  if (!parsePeers(rd, j, d)) return false;
  if (const nlohmann::json* a = rd.find(j, "attributes")) {
    auto snap = attrs::Snapshot::deserialize(a->dump());
    if (!snap.isOk()) {
      rd.error = rd.source + ": attributes: " + snap.status().message();
      return false;
    }
    if (snap.value().rank != d->rank) return rd.fail("attributes.rank", "the dump's rank", &(*a)["rank"]);
    d->attributes = snap.take();
  }
  return true;
}

}  // namespace

Result<RankDump> parseDump(const nlohmann::json& j, const std::string& source) {
  Reader rd{source, ""};
  RankDump d;
  d.source = source;
  if (!j.is_object()) {
    rd.fail("(top level)", "a JSON object (a Theseus flight-recorder dump)", &j);
    return invalidArgument("%s", rd.error.c_str());
  }
  uint64_t format = 0;
  if (!rd.u64(j, "", "format", &format)) return invalidArgument("%s", rd.error.c_str());
  if (format != 1) return invalidArgument("%s: format %llu is not 1 (a newer Theseus wrote it?)", source.c_str(),
                                          static_cast<unsigned long long>(format));
  bool ok = rd.i32(j, "", "rank", &d.rank, 0) && rd.i32(j, "", "nranks", &d.nranks, 0, false) &&
            rd.str(j, "", "comm", &d.comm, false) && rd.str(j, "", "host", &d.host, false) &&
            rd.str(j, "", "reason", &d.reason, false) && rd.u64(j, "", "now_ns", &d.nowNs, false) &&
            rd.u64(j, "", "created_ns", &d.createdNs, false);
  if (ok && d.nranks > 0 && d.rank >= d.nranks) ok = rd.fail("rank", "a rank below nranks", &j["rank"]);
  const nlohmann::json* entries = ok ? rd.find(j, "entries") : nullptr;
  if (ok && (entries == nullptr || !entries->is_array())) ok = rd.fail("entries", "an array", entries);
  for (size_t i = 0; ok && i < entries->size(); ++i) {
    DumpOp o;
    ok = parseOp(rd, (*entries)[i], "entries[" + std::to_string(i) + "].", &o);
    d.ops.push_back(std::move(o));
  }
  if (ok) ok = parseContext(rd, j, &d);
  if (!ok) return invalidArgument("%s", rd.error.c_str());
  return d;
}

}  // namespace theseus::doctor
