// Reading MSCCL XML (msccl_import.h): elements and attributes into the model
// of msccl_model.h, with every check that needs only the document (ids,
// peers, channels, buffer geometry and bounds, dependency targets). Errors are
// thrown as XmlError{line, text} and turned into a Status at parseMscclXml.
#include "schedule/user/msccl_import.h"

#include <tinyxml2.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "common/log.h"
#include "schedule/user/json_schedule.h"
#include "schedule/user/msccl_model.h"

namespace theseus::schedule::user {
namespace {

using namespace msccl;
using tinyxml2::XMLElement;

struct XmlError {
  int line;
  std::string message;
};

[[noreturn]] void fail(int line, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void fail(int line, const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  throw XmlError{line, text};
}

const char* attr(const XMLElement* e, const char* name, const std::string& where) {
  const char* v = e->Attribute(name);
  if (!v) fail(e->GetLineNum(), "%s: missing attribute %s", where.c_str(), name);
  return v;
}

int64_t intAttr(const XMLElement* e, const char* name, const std::string& where, int64_t lo, int64_t hi) {
  const char* v = attr(e, name, where);
  errno = 0;
  char* end = nullptr;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end) fail(e->GetLineNum(), "%s: %s=\"%s\" is not an integer", where.c_str(), name, v);
  if (x < lo || x > hi)
    fail(e->GetLineNum(), "%s: %s=%lld is out of range %lld..%lld", where.c_str(), name, x, static_cast<long long>(lo),
         static_cast<long long>(hi));
  return x;
}

int64_t optionalInt(const XMLElement* e, const char* name, const std::string& where, int64_t lo, int64_t hi,
                    int64_t fallback) {
  return e->Attribute(name) ? intAttr(e, name, where, lo, hi) : fallback;
}

void onlyChildren(const XMLElement* parent, const char* allowed, const std::string& where) {
  for (const XMLElement* c = parent->FirstChildElement(); c; c = c->NextSiblingElement())
    if (std::string(c->Name()) != allowed)
      fail(c->GetLineNum(), "%s: unsupported element <%s> (expected <%s>)", where.c_str(), c->Name(), allowed);
}

Collective parseColl(const XMLElement* e) {
  std::string coll = attr(e, "coll", "<algo>");
  static const std::map<std::string, Collective> kColls = {
      {"allreduce", Collective::kAllReduce},         {"allgather", Collective::kAllGather},
      {"reduce_scatter", Collective::kReduceScatter}, {"reducescatter", Collective::kReduceScatter},
      {"alltoall", Collective::kAlltoAll},           {"broadcast", Collective::kBroadcast},
      {"reduce", Collective::kReduce},               {"gather", Collective::kGather},
      {"scatter", Collective::kScatter}};
  auto it = kColls.find(coll);
  if (it == kColls.end())
    fail(e->GetLineNum(), "<algo>: coll=\"%s\" is not supported (supported: allreduce, allgather, reduce_scatter, "
                          "alltoall, broadcast, reduce, gather, scatter)", coll.c_str());
  return it->second;
}

StepType parseType(const std::string& t, int line, const std::string& where) {
  static const std::map<std::string, StepType> kTypes = {
      {"s", StepType::kSend},           {"r", StepType::kRecv},
      {"rcs", StepType::kRecvCopySend}, {"rrs", StepType::kRecvReduceSend},
      {"rrc", StepType::kRecvReduce},   {"rrcs", StepType::kRecvReduceCopySend},
      {"cpy", StepType::kCopy},         {"re", StepType::kReduce},
      {"nop", StepType::kNop}};
  auto it = kTypes.find(t);
  if (it == kTypes.end())
    fail(line, "%s: step type \"%s\" is not supported (supported: s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)",
         where.c_str(), t.c_str());
  return it->second;
}

Buf parseBuffer(const XMLElement* e, const char* name, const std::string& where) {
  std::string b = attr(e, name, where);
  if (b == "i") return Buf::kInput;
  if (b == "o") return Buf::kOutput;
  if (b == "s") return Buf::kScratch;
  fail(e->GetLineNum(), "%s: %s=\"%s\" is not a buffer (i, o or s)", where.c_str(), name, b.c_str());
}

void readAlgoHeader(const XMLElement* e, XAlgo* a) {
  a->line = e->GetLineNum();
  a->name = attr(e, "name", "<algo>");
  a->collective = parseColl(e);
  a->ngpus = static_cast<int>(intAttr(e, "ngpus", "<algo>", 1, kMaxJsonRanks));
  a->nchannels = static_cast<int>(intAttr(e, "nchannels", "<algo>", 1, kMaxUserChannels));
  a->nchunksPerLoop = intAttr(e, "nchunksperloop", "<algo>", 1, INT32_MAX);
  bool inPlace = intAttr(e, "inplace", "<algo>", 0, 1) != 0;
  int64_t outOfPlace = optionalInt(e, "outofplace", "<algo>", 0, 1, -1);
  if (!inPlace && outOfPlace == 0) fail(a->line, "<algo>: inplace=0 and outofplace=0: the algorithm serves no layout");
  a->layout = inPlace ? (outOfPlace == 1 ? Layout::kBoth : Layout::kInPlace) : Layout::kOutOfPlace;
  a->root = static_cast<int>(optionalInt(e, "root", "<algo>", 0, a->ngpus - 1, 0));
  a->minBytes = static_cast<uint64_t>(optionalInt(e, "minBytes", "<algo>", 0, INT64_MAX, 0));
  int64_t maxBytes = optionalInt(e, "maxBytes", "<algo>", 0, INT64_MAX, 0);
  a->maxBytes = maxBytes == 0 ? UINT64_MAX : static_cast<uint64_t>(maxBytes);  // 0: no upper bound
  if (a->minBytes > a->maxBytes) fail(a->line, "<algo>: minBytes is larger than maxBytes");
  if (const char* proto = e->Attribute("proto")) a->proto = proto;
  if (const char* redop = e->Attribute("redop")) {
    std::string r = redop;  // the operation comes from the call; these only document intent
    if (r != "sum" && r != "prod" && r != "max" && r != "min" && r != "nop")
      fail(a->line, "<algo>: redop=\"%s\" is not supported (sum, prod, max, min, nop)", redop);
  }
}

XStep readStep(const XMLElement* e, const XThreadBlock& tb, int gpu, int position) {
  const std::string where = "gpu " + std::to_string(gpu) + " tb " + std::to_string(tb.id) + " step " +
                            std::to_string(position);
  XStep st;
  st.line = e->GetLineNum();
  st.s = static_cast<int>(intAttr(e, "s", where, 0, INT32_MAX));
  if (st.s != position)
    fail(st.line, "%s: s=%d, but steps of a thread block must be numbered 0, 1, 2, ... in order (expected %d)",
         where.c_str(), st.s, position);
  st.typeText = attr(e, "type", where);
  st.type = parseType(st.typeText, st.line, where);
  st.depTb = static_cast<int>(optionalInt(e, "depid", where, -1, INT32_MAX, -1));
  st.depStep = static_cast<int>(optionalInt(e, "deps", where, -1, INT32_MAX, -1));
  if ((st.depTb < 0) != (st.depStep < 0))
    fail(st.line, "%s: depid=%d and deps=%d must both be -1 or both name a step", where.c_str(), st.depTb, st.depStep);
  optionalInt(e, "hasdep", where, 0, 1, 0);
  if (st.type == StepType::kNop) return st;
  st.count = intAttr(e, "cnt", where, 1, INT32_MAX);
  if (stepReadsSrc(st.type)) {
    st.srcBuf = parseBuffer(e, "srcbuf", where);
    st.srcOff = intAttr(e, "srcoff", where, 0, INT32_MAX);
  }
  if (stepWritesDst(st.type)) {
    st.dstBuf = parseBuffer(e, "dstbuf", where);
    st.dstOff = intAttr(e, "dstoff", where, 0, INT32_MAX);
  }
  if (stepSends(st.type) && tb.send < 0)
    fail(st.line, "%s: type \"%s\" sends but the thread block has send=-1", where.c_str(), st.typeText.c_str());
  if (stepReceives(st.type) && tb.recv < 0)
    fail(st.line, "%s: type \"%s\" receives but the thread block has recv=-1", where.c_str(), st.typeText.c_str());
  return st;
}

XThreadBlock readThreadBlock(const XMLElement* e, const XAlgo& a, int gpu) {
  const std::string where = "gpu " + std::to_string(gpu) + " <tb>";
  XThreadBlock tb;
  tb.line = e->GetLineNum();
  tb.id = static_cast<int>(intAttr(e, "id", where, 0, INT32_MAX));
  const std::string tbWhere = "gpu " + std::to_string(gpu) + " tb " + std::to_string(tb.id);
  tb.send = static_cast<int>(intAttr(e, "send", tbWhere, -1, a.ngpus - 1));
  tb.recv = static_cast<int>(intAttr(e, "recv", tbWhere, -1, a.ngpus - 1));
  if (tb.send == gpu || tb.recv == gpu)
    fail(tb.line, "%s: send=%d recv=%d: a thread block cannot talk to its own gpu", tbWhere.c_str(), tb.send, tb.recv);
  tb.channel = static_cast<int>(intAttr(e, "chan", tbWhere, -1, a.nchannels - 1));
  if (tb.channel < 0) {
    if (tb.send >= 0 || tb.recv >= 0)
      fail(tb.line, "%s: chan=-1 is only allowed for thread blocks without peers", tbWhere.c_str());
    tb.channel = 0;
  }
  onlyChildren(e, "step", tbWhere);
  int position = 0;
  for (const XMLElement* s = e->FirstChildElement("step"); s; s = s->NextSiblingElement("step")) {
    if (position >= static_cast<int>(kMaxStepsPerRank)) fail(s->GetLineNum(), "%s: too many steps", tbWhere.c_str());
    tb.steps.push_back(readStep(s, tb, gpu, position++));
  }
  return tb;
}

// Per-buffer chunk counts must match the geometry (0 = buffer not addressed).
void checkChunkCounts(const XGpu& g, const XAlgo& a, uint32_t cpb) {
  const uint64_t in = uint64_t{inputBlocks(a.collective, a.ngpus)} * cpb;
  const uint64_t out = uint64_t{outputBlocks(a.collective, a.ngpus)} * cpb;
  const char* coll = collectiveName(a.collective);
  if (g.inputChunks != 0 && static_cast<uint64_t>(g.inputChunks) != in)
    fail(g.line, "gpu %d: i_chunks=%lld, but %s on %d gpus with nchunksperloop=%lld has %llu input chunks (or 0)",
         g.id, static_cast<long long>(g.inputChunks), coll, a.ngpus, static_cast<long long>(a.nchunksPerLoop),
         static_cast<unsigned long long>(in));
  if (g.outputChunks != 0 && static_cast<uint64_t>(g.outputChunks) != out)
    fail(g.line, "gpu %d: o_chunks=%lld, but %s on %d gpus with nchunksperloop=%lld has %llu output chunks (or 0)",
         g.id, static_cast<long long>(g.outputChunks), coll, a.ngpus, static_cast<long long>(a.nchunksPerLoop),
         static_cast<unsigned long long>(out));
}

// Channels, unique (peer, channel) per direction, dependency targets, bounds.
void checkGpu(const XGpu& g) {
  std::map<int, const XThreadBlock*> byId;
  std::map<std::pair<int, int>, int> sendTb, recvTb;
  for (const XThreadBlock& tb : g.tbs) {
    if (!byId.emplace(tb.id, &tb).second) fail(tb.line, "gpu %d: duplicate thread block id %d", g.id, tb.id);
    auto unique = [&](std::map<std::pair<int, int>, int>& seen, int peer, const char* dir) {
      if (peer < 0) return;
      auto [it, fresh] = seen.emplace(std::make_pair(peer, tb.channel), tb.id);
      if (!fresh)
        fail(tb.line, "gpu %d: thread blocks %d and %d both %s gpu %d on channel %d (MSCCL connects one thread block "
                      "per peer, channel and direction)", g.id, it->second, tb.id, dir, peer, tb.channel);
    };
    unique(sendTb, tb.send, "send to");
    unique(recvTb, tb.recv, "receive from");
  }
  auto bound = [&](const XStep& st, const XThreadBlock& tb, Buf b, int64_t off, const char* role) {
    int64_t chunks = b == Buf::kInput ? g.inputChunks : b == Buf::kOutput ? g.outputChunks : g.scratchChunks;
    if (off + st.count > chunks)
      fail(st.line, "gpu %d tb %d step %d: %s %s[%lld:%lld] is out of range: gpu %d declares %s_chunks=%lld", g.id,
           tb.id, st.s, role, b == Buf::kInput ? "i" : b == Buf::kOutput ? "o" : "s", static_cast<long long>(off),
           static_cast<long long>(off + st.count), g.id, b == Buf::kInput ? "i" : b == Buf::kOutput ? "o" : "s",
           static_cast<long long>(chunks));
  };
  for (const XThreadBlock& tb : g.tbs) {
    for (const XStep& st : tb.steps) {
      if (stepReadsSrc(st.type)) bound(st, tb, st.srcBuf, st.srcOff, "source");
      if (stepWritesDst(st.type)) bound(st, tb, st.dstBuf, st.dstOff, "destination");
      if (st.depTb < 0) continue;
      auto it = byId.find(st.depTb);
      if (it == byId.end())
        fail(st.line, "gpu %d tb %d step %d: depid=%d names no thread block of gpu %d", g.id, tb.id, st.s, st.depTb,
             g.id);
      if (st.depStep >= static_cast<int>(it->second->steps.size()))
        fail(st.line, "gpu %d tb %d step %d: deps=%d, but thread block %d has %zu steps", g.id, tb.id, st.s,
             st.depStep, st.depTb, it->second->steps.size());
    }
  }
}

XAlgo readDocument(const tinyxml2::XMLDocument& doc) {
  const XMLElement* root = doc.RootElement();
  if (!root || std::string(root->Name()) != "algo")
    fail(root ? root->GetLineNum() : 1, "the root element must be <algo> (got <%s>)", root ? root->Name() : "");
  XAlgo a;
  readAlgoHeader(root, &a);
  const int maxBlocks = static_cast<int>(std::max(inputBlocks(a.collective, a.ngpus), outputBlocks(a.collective, a.ngpus)));
  if (a.nchunksPerLoop % maxBlocks != 0 || a.nchunksPerLoop / maxBlocks > kMaxChunksPerBlock)
    fail(a.line, "<algo>: nchunksperloop=%lld must be a multiple of %d (the %s buffer has %d blocks on %d gpus) with "
                 "at most %u chunks per block", static_cast<long long>(a.nchunksPerLoop), maxBlocks,
         inputBlocks(a.collective, a.ngpus) > 1 ? "input" : "output", maxBlocks, a.ngpus, kMaxChunksPerBlock);
  const uint32_t cpb = static_cast<uint32_t>(a.nchunksPerLoop / maxBlocks);
  onlyChildren(root, "gpu", "<algo>");
  a.gpus.resize(a.ngpus);
  std::vector<bool> seen(a.ngpus, false);
  for (const XMLElement* g = root->FirstChildElement("gpu"); g; g = g->NextSiblingElement("gpu")) {
    int id = static_cast<int>(intAttr(g, "id", "<gpu>", 0, INT32_MAX));
    if (id >= a.ngpus) fail(g->GetLineNum(), "<gpu id=%d>: out of range for ngpus=%d", id, a.ngpus);
    if (seen[id]) fail(g->GetLineNum(), "gpu %d appears twice", id);
    seen[id] = true;
    XGpu& gpu = a.gpus[id];
    const std::string where = "gpu " + std::to_string(id);
    gpu.id = id;
    gpu.line = g->GetLineNum();
    gpu.inputChunks = intAttr(g, "i_chunks", where, 0, INT32_MAX);
    gpu.outputChunks = intAttr(g, "o_chunks", where, 0, INT32_MAX);
    gpu.scratchChunks = intAttr(g, "s_chunks", where, 0, INT32_MAX);
    checkChunkCounts(gpu, a, cpb);
    onlyChildren(g, "tb", where);
    size_t steps = 0;
    for (const XMLElement* t = g->FirstChildElement("tb"); t; t = t->NextSiblingElement("tb")) {
      gpu.tbs.push_back(readThreadBlock(t, a, id));
      steps += gpu.tbs.back().steps.size();
      if (steps > kMaxStepsPerRank)
        fail(t->GetLineNum(), "gpu %d: more than %u steps in all thread blocks", id, kMaxStepsPerRank);
    }
    checkGpu(gpu);
  }
  for (int id = 0; id < a.ngpus; ++id)
    if (!seen[id]) fail(a.line, "<algo>: ngpus=%d but there is no <gpu id=\"%d\">", a.ngpus, id);
  return a;
}

// MSCCL names may hold any text; schedule names are [A-Za-z0-9_.-].
std::string scheduleNameFor(const std::string& algoName, const std::string& path) {
  std::string base = algoName;
  if (base.empty()) {
    base = path.substr(path.find_last_of('/') + 1);
    base = base.substr(0, base.find('.'));
  }
  std::string out;
  for (char c : base) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    out += ok ? c : '_';
  }
  return out.substr(0, 128);
}

}  // namespace

Result<std::shared_ptr<FixedSchedule>> parseMscclXml(const std::string& text, const std::string& path) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(text.data(), text.size()) != tinyxml2::XML_SUCCESS)
    return invalidArgument("%s:%d: XML syntax error: %s", path.c_str(), doc.ErrorLineNum(), doc.ErrorStr());
  XAlgo algo;
  try {
    algo = readDocument(doc);
  } catch (const XmlError& e) {
    return invalidArgument("%s:%d: %s", path.c_str(), e.line, e.message.c_str());
  } catch (const std::exception& e) {
    return invalidArgument("%s: %s", path.c_str(), e.what());
  }
  TH_ASSIGN(FixedProgram fp, msccl::lower(algo, path));
  ScheduleInfo info;
  info.name = scheduleNameFor(algo.name, path);
  info.path = path;
  info.kind = SourceKind::kMscclXml;
  info.minBytes = algo.minBytes;
  info.maxBytes = algo.maxBytes;
  info.contentHash = fnv1a(text);
  // The XML's text is any bytes: shown in logs and tools (and exported as JSON), so escaped.
  info.description = "MSCCL algo '" + log::printable(algo.name, 128) + "'" +
                     (algo.proto.empty() ? "" : " (proto " + log::printable(algo.proto, 32) + ")");
  std::vector<FixedProgram> programs;
  programs.push_back(std::move(fp));
  return FixedSchedule::create(std::move(info), algo.collective, std::move(programs));
}

Result<std::shared_ptr<FixedSchedule>> loadMscclXml(const std::string& path) {
  TH_ASSIGN(std::string text, readScheduleFile(path));
  return parseMscclXml(text, path);
}

}  // namespace theseus::schedule::user
