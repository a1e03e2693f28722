// The version-1 JSON schedule reader (json_schedule.h).
//
// Parsing walks the document once with the JSON pointer of every value at
// hand; the helpers throw JsonError{pointer, message}, which parseJsonSchedule
// (the module edge) turns into a Status. Nothing else throws: nlohmann's own
// exceptions are confined to the parse() call and caught there too.
//
// Geometry is known before steps are read (nranks, chunks_per_block,
// scratch_blocks, channels), so every index is checked where it is written:
// a step never refers to a peer, channel, chunk or dep that does not exist.
// What needs the whole program (matching, results, deadlock) is the
// verifier's job afterwards.
#include "schedule/user/json_schedule.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace theseus::schedule::user {
namespace {

using nlohmann::json;

struct JsonError {
  std::string path;
  std::string message;
};

[[noreturn]] void fail(const std::string& path, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void fail(const std::string& path, const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  throw JsonError{path.empty() ? "/" : path, text};
}

const char* typeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a non-integer number";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

std::string child(const std::string& path, const std::string& key) {
  std::string escaped;
  for (char c : key) escaped += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return path + "/" + escaped;
}
std::string child(const std::string& path, size_t index) { return path + "/" + std::to_string(index); }

int64_t asInt(const json& j, const std::string& path, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) fail(path, "expected an integer, got %s", typeName(j));
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(path, "%s is out of range %lld..%lld", j.dump().c_str(), static_cast<long long>(lo),
         static_cast<long long>(hi));
  int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    fail(path, "%lld is out of range %lld..%lld", static_cast<long long>(v), static_cast<long long>(lo),
         static_cast<long long>(hi));
  return v;
}

uint64_t asU64(const json& j, const std::string& path) {
  if (!j.is_number_integer()) fail(path, "expected an integer, got %s", typeName(j));
  if (!j.is_number_unsigned() && j.get<int64_t>() < 0) fail(path, "%s is negative", j.dump().c_str());
  return j.get<uint64_t>();
}

const std::string& asString(const json& j, const std::string& path) {
  if (!j.is_string()) fail(path, "expected a string, got %s", typeName(j));
  return j.get_ref<const std::string&>();
}

void requireObject(const json& j, const std::string& path, const std::set<std::string>& allowed) {
  if (!j.is_object()) fail(path, "expected an object, got %s", typeName(j));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (allowed.count(it.key())) continue;
    std::string list;
    for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
    fail(child(path, it.key()), "unknown field \"%s\" (allowed here: %s)", it.key().c_str(), list.c_str());
  }
}

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& required(const json& obj, const std::string& path, const char* key) {
  const json* j = field(obj, key);
  if (!j) fail(path, "missing required field \"%s\"", key);
  return *j;
}

// Settings a program inherits from the top level unless it overrides them.
struct ProgramFields {
  int64_t nranks = -1;
  int64_t root = 0;
  int64_t chunksPerBlock = 1;
  int64_t scratchBlocks = 0;
  int64_t channels = 1;
  Layout layout = Layout::kOutOfPlace;
};

Layout parseLayout(const json& j, const std::string& path) {
  if (j.is_boolean()) return j.get<bool>() ? Layout::kInPlace : Layout::kOutOfPlace;
  if (j.is_string() && j.get<std::string>() == "both") return Layout::kBoth;
  fail(path, "expected true, false or \"both\", got %s", j.dump().c_str());
}

void readFields(const json& obj, const std::string& path, ProgramFields* f) {
  if (const json* j = field(obj, "nranks")) f->nranks = asInt(*j, child(path, "nranks"), 1, kMaxJsonRanks);
  if (const json* j = field(obj, "root")) f->root = asInt(*j, child(path, "root"), 0, kMaxJsonRanks - 1);
  if (const json* j = field(obj, "chunks_per_block"))
    f->chunksPerBlock = asInt(*j, child(path, "chunks_per_block"), 1, kMaxChunksPerBlock);
  if (const json* j = field(obj, "scratch_blocks"))
    f->scratchBlocks = asInt(*j, child(path, "scratch_blocks"), 0, kMaxScratchBlocks);
  if (const json* j = field(obj, "channels")) f->channels = asInt(*j, child(path, "channels"), 1, kMaxUserChannels);
  if (const json* j = field(obj, "in_place")) f->layout = parseLayout(*j, child(path, "in_place"));
}

// Reads steps of one program; knows its geometry.
class StepReader {
 public:
  StepReader(const Program& p, int rank) : p_(p), rank_(rank) {}
  Step read(const json& j, const std::string& path, uint32_t index) const;

 private:
  ChunkRange range(const json& j, const std::string& path) const;
  ChunkRange checked(ChunkRange r, const std::string& path) const;
  int32_t peer(const json& j, const std::string& path) const;

  const Program& p_;
  int rank_;
};

Buf parseBuf(const std::string& name, const std::string& path) {
  if (name == "input") return Buf::kInput;
  if (name == "output") return Buf::kOutput;
  if (name == "scratch") return Buf::kScratch;
  fail(path, "unknown buffer \"%s\" (expected input, output or scratch)", name.c_str());
}

// "input[3]" or "output[0:4]" (chunks 0..3).
bool parseCompactRange(const std::string& text, std::string* buf, uint64_t* first, uint64_t* end) {
  size_t open = text.find('['), close = text.size() - 1;
  if (open == std::string::npos || open == 0 || text.back() != ']') return false;
  *buf = text.substr(0, open);
  std::string inner = text.substr(open + 1, close - open - 1);
  size_t colon = inner.find(':');
  auto number = [](const std::string& s, uint64_t* out) {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stoull(s);
    return true;
  };
  if (colon == std::string::npos) {
    if (!number(inner, first)) return false;
    *end = *first + 1;
    return true;
  }
  return number(inner.substr(0, colon), first) && number(inner.substr(colon + 1), end);
}

ChunkRange StepReader::checked(ChunkRange r, const std::string& path) const {
  uint32_t chunks = p_.chunksIn(r.buf);
  if (r.buf == Buf::kScratch && p_.scratchBlocks == 0)
    fail(path, "uses the scratch buffer but the program declares no scratch blocks (set \"scratch_blocks\")");
  if (static_cast<uint64_t>(r.first) + r.count > chunks)
    fail(path, "%s chunks [%u,%llu) are out of range: the %s buffer has %u chunks (%u blocks of %u)", bufName(r.buf),
         r.first, static_cast<unsigned long long>(r.first) + r.count, bufName(r.buf), chunks,
         chunks / p_.chunksPerBlock, p_.chunksPerBlock);
  return r;
}

ChunkRange StepReader::range(const json& j, const std::string& path) const {
  ChunkRange r;
  if (j.is_string()) {
    std::string buf;
    uint64_t first = 0, end = 0;
    if (!parseCompactRange(j.get<std::string>(), &buf, &first, &end))
      fail(path, "\"%s\" is not a chunk range (write \"input[3]\", \"output[0:4]\" or {\"buf\": \"input\", "
                 "\"chunk\": 3, \"count\": 1})", j.get<std::string>().c_str());
    if (end <= first) fail(path, "\"%s\" is an empty chunk range ([a:b] means chunks a..b-1)", j.get<std::string>().c_str());
    r.buf = parseBuf(buf, path);
    if (end > UINT32_MAX) fail(path, "chunk index %llu is out of range", static_cast<unsigned long long>(end));
    r.first = static_cast<uint32_t>(first);
    r.count = static_cast<uint32_t>(end - first);
    return checked(r, path);
  }
  requireObject(j, path, {"buf", "chunk", "count"});
  r.buf = parseBuf(asString(required(j, path, "buf"), child(path, "buf")), child(path, "buf"));
  r.first = static_cast<uint32_t>(asInt(required(j, path, "chunk"), child(path, "chunk"), 0, INT32_MAX));
  r.count = 1;
  if (const json* c = field(j, "count")) r.count = static_cast<uint32_t>(asInt(*c, child(path, "count"), 1, INT32_MAX));
  return checked(r, path);
}

int32_t StepReader::peer(const json& j, const std::string& path) const {
  int64_t v = asInt(j, path, 0, INT32_MAX);
  if (v >= p_.nranks) fail(path, "peer %lld is out of range for %d ranks", static_cast<long long>(v), p_.nranks);
  if (v == rank_) fail(path, "peer %lld is this rank itself (use copy/reduce for local data)", static_cast<long long>(v));
  return static_cast<int32_t>(v);
}

std::string opList() {
  std::string out;
  for (int i = 0; i <= static_cast<int>(Op::kRecvReduceCopySend); ++i)
    out += (out.empty() ? "" : ", ") + std::string(opName(static_cast<Op>(i)));
  return out;
}

Step StepReader::read(const json& j, const std::string& path, uint32_t index) const {
  requireObject(j, path, {"op", "peer", "recv_peer", "send_peer", "src", "dst", "channel", "deps", "comment"});
  Step s;
  const std::string& opText = asString(required(j, path, "op"), child(path, "op"));
  if (!parseOp(opText, &s.op)) fail(child(path, "op"), "unknown op \"%s\" (known: %s)", opText.c_str(), opList().c_str());
  const bool recvs = opReceives(s.op), sends = opSends(s.op);
  auto forbid = [&](const char* key, bool used, const char* why) {
    if (!used && field(j, key)) fail(child(path, key), "op %s %s; remove \"%s\"", opText.c_str(), why, key);
  };
  forbid("recv_peer", recvs, "does not receive");
  forbid("send_peer", sends, "does not send");
  forbid("src", opReadsSrc(s.op), "reads no source");
  forbid("dst", opWritesDst(s.op), "writes no destination");
  if (const json* pj = field(j, "peer")) {
    if (recvs == sends)
      fail(child(path, "peer"), "op %s %s; use %s", opText.c_str(),
           recvs ? "has two peers" : "has no peer", recvs ? "\"recv_peer\" and \"send_peer\"" : "no peer field");
    if (field(j, recvs ? "recv_peer" : "send_peer"))
      fail(child(path, "peer"), "give either \"peer\" or \"%s\", not both", recvs ? "recv_peer" : "send_peer");
    (recvs ? s.recvPeer : s.sendPeer) = peer(*pj, child(path, "peer"));
  }
  if (recvs && s.recvPeer < 0) s.recvPeer = peer(required(j, path, "recv_peer"), child(path, "recv_peer"));
  if (sends && s.sendPeer < 0) s.sendPeer = peer(required(j, path, "send_peer"), child(path, "send_peer"));
  if (opReadsSrc(s.op)) s.src = range(required(j, path, "src"), child(path, "src"));
  if (opWritesDst(s.op)) s.dst = range(required(j, path, "dst"), child(path, "dst"));
  if (const json* c = field(j, "channel")) {
    int64_t ch = asInt(*c, child(path, "channel"), 0, INT32_MAX);
    if (ch >= p_.nchannels)
      fail(child(path, "channel"), "channel %lld is out of range: the program has %u channel(s) (set \"channels\")",
           static_cast<long long>(ch), p_.nchannels);
    s.channel = static_cast<uint8_t>(ch);
  }
  if (const json* d = field(j, "deps")) {
    const std::string dpath = child(path, "deps");
    if (!d->is_array()) fail(dpath, "expected an array of earlier step indices, got %s", typeName(*d));
    if (d->size() > kMaxDepsPerStep) fail(dpath, "%zu deps exceed the limit of %u", d->size(), kMaxDepsPerStep);
    for (size_t k = 0; k < d->size(); ++k) {
      int64_t dep = asInt((*d)[k], child(dpath, k), 0, INT32_MAX);
      if (dep >= index)
        fail(child(dpath, k), "dep %lld is not an earlier step of this rank (this is step %u)",
             static_cast<long long>(dep), index);
      s.deps.push_back(static_cast<uint32_t>(dep));
    }
  }
  return s;
}

// One rank entry: an array of steps or {"rank": r, "steps": [...]}.
std::string readRank(const json& j, const std::string& path, Program* p, int rank) {
  std::string stepsPath = path;
  const json* steps = &j;
  if (j.is_object()) {
    requireObject(j, path, {"rank", "steps", "comment"});
    if (const json* r = field(j, "rank")) {
      int64_t v = asInt(*r, child(path, "rank"), 0, INT32_MAX);
      if (v != rank) fail(child(path, "rank"), "this is entry %d of \"ranks\", so it must be rank %d (got %lld)", rank, rank,
                          static_cast<long long>(v));
    }
    stepsPath = child(path, "steps");
    steps = &required(j, path, "steps");
  }
  if (!steps->is_array()) fail(stepsPath, "expected an array of steps, got %s", typeName(*steps));
  if (steps->size() > kMaxStepsPerRank)
    fail(stepsPath, "%zu steps exceed the limit of %u per rank", steps->size(), kMaxStepsPerRank);
  StepReader reader(*p, rank);
  std::vector<Step>& out = p->ranks[rank].steps;
  out.reserve(steps->size());
  for (size_t i = 0; i < steps->size(); ++i)
    out.push_back(reader.read((*steps)[i], child(stepsPath, i), static_cast<uint32_t>(i)));
  return stepsPath;
}

FixedProgram readProgram(const json& obj, const std::string& path, ProgramFields f, Collective c) {
  readFields(obj, path, &f);
  if (f.nranks < 0) fail(path, "missing required field \"nranks\"");
  FixedProgram fp;
  fp.origin = path.empty() ? "" : "program " + path;
  fp.layout = f.layout;
  Program& p = fp.program;
  p.collective = c;
  p.nranks = static_cast<int>(f.nranks);
  if (isRooted(c) && f.root >= f.nranks)
    fail(child(path, "root"), "root %lld is out of range for %d ranks", static_cast<long long>(f.root), p.nranks);
  p.root = isRooted(c) ? static_cast<int>(f.root) : 0;
  p.chunksPerBlock = static_cast<uint32_t>(f.chunksPerBlock);
  p.scratchBlocks = static_cast<uint32_t>(f.scratchBlocks);
  p.nchannels = static_cast<uint32_t>(f.channels);
  uint64_t blocks = std::max<uint64_t>({inputBlocks(c, p.nranks), outputBlocks(c, p.nranks), p.scratchBlocks});
  if (blocks * p.chunksPerBlock > (1ull << 31))
    fail(path, "%llu blocks of %u chunks exceed the chunk index range", static_cast<unsigned long long>(blocks),
         p.chunksPerBlock);
  const uint64_t slots = chunkSlots(c, p.nranks, p.chunksPerBlock, p.scratchBlocks);
  if (slots > kMaxChunkSlots)
    fail(path, "%d ranks with %llu chunks each (input, output and scratch) are %llu chunk slots, more than the %llu "
         "a schedule may have (fewer ranks, chunks_per_block or scratch_blocks)", p.nranks,
         static_cast<unsigned long long>(slots / p.nranks), static_cast<unsigned long long>(slots),
         static_cast<unsigned long long>(kMaxChunkSlots));
  const std::string ranksPath = child(path, "ranks");
  const json& ranks = required(obj, path, "ranks");
  if (!ranks.is_array()) fail(ranksPath, "expected an array with one entry per rank, got %s", typeName(ranks));
  if (ranks.size() != static_cast<size_t>(p.nranks))
    fail(ranksPath, "has %zu entries but nranks is %d (one entry per rank)", ranks.size(), p.nranks);
  p.ranks.resize(p.nranks);
  auto stepPaths = std::make_shared<std::vector<std::string>>();
  for (int r = 0; r < p.nranks; ++r) stepPaths->push_back(readRank(ranks[r], child(ranksPath, r), &p, r));
  fp.locate = [stepPaths](int rank, uint32_t step) {
    if (rank < 0 || static_cast<size_t>(rank) >= stepPaths->size()) return std::string();
    return (*stepPaths)[rank] + "/" + std::to_string(step);
  };
  return fp;
}

const std::set<std::string> kTopFields = {"version", "name",     "collective",     "description",    "comment",
                                          "metadata", "nranks",  "root",           "chunks_per_block",
                                          "scratch_blocks",      "channels",       "in_place",       "size_range",
                                          "ranks",    "programs"};
const std::set<std::string> kProgramFields = {"nranks",   "root",     "chunks_per_block", "scratch_blocks",
                                              "channels", "in_place", "ranks",            "comment"};

void readHeader(const json& doc, ScheduleInfo* info, Collective* c) {
  const json& version = required(doc, "", "version");
  if (!version.is_number_integer()) fail("/version", "expected an integer, got %s", typeName(version));
  bool supported = version.is_number_unsigned() ? version.get<uint64_t>() == kJsonFormatVersion
                                                 : version.get<int64_t>() == kJsonFormatVersion;
  if (!supported)
    fail("/version", "unsupported format version %s (this Theseus reads version %d)", version.dump().c_str(),
         kJsonFormatVersion);
  info->name = asString(required(doc, "", "name"), "/name");
  Status st = checkScheduleName(info->name);
  if (!st.isOk()) fail("/name", "%s", st.message().c_str());
  const std::string& coll = asString(required(doc, "", "collective"), "/collective");
  if (!parseCollective(coll, c))
    fail("/collective", "unknown collective \"%s\" (known: allreduce, allgather, reducescatter, broadcast, reduce, "
                        "alltoall, gather, scatter)", coll.c_str());
  if (const json* d = field(doc, "description")) info->description = asString(*d, "/description");
  if (const json* m = field(doc, "metadata"); m && !m->is_object())
    fail("/metadata", "expected an object, got %s", typeName(*m));
  if (const json* r = field(doc, "size_range")) {
    if (!r->is_array() || r->size() != 2)
      fail("/size_range", "expected [min_bytes, max_bytes], got %s", r->dump().c_str());
    info->minBytes = asU64((*r)[0], "/size_range/0");
    info->maxBytes = asU64((*r)[1], "/size_range/1");
    if (info->minBytes > info->maxBytes)
      fail("/size_range", "min_bytes %llu is larger than max_bytes %llu",
           static_cast<unsigned long long>(info->minBytes), static_cast<unsigned long long>(info->maxBytes));
  }
}

std::vector<FixedProgram> readPrograms(const json& doc, Collective c) {
  ProgramFields defaults;
  std::vector<FixedProgram> out;
  const json* programs = field(doc, "programs");
  if (!programs) {
    if (!field(doc, "ranks")) fail("", "missing required field \"ranks\" (or \"programs\" for several rank counts)");
    out.push_back(readProgram(doc, "", defaults, c));
    return out;
  }
  for (const char* key : {"ranks", "nranks"})
    if (field(doc, key))
      fail(child("", key), "\"%s\" belongs inside each entry of \"programs\" when \"programs\" is used", key);
  readFields(doc, "", &defaults);
  if (!programs->is_array() || programs->empty())
    fail("/programs", "expected a non-empty array of programs, got %s", programs->dump().substr(0, 40).c_str());
  for (size_t i = 0; i < programs->size(); ++i) {
    const std::string path = child("/programs", i);
    requireObject((*programs)[i], path, kProgramFields);
    out.push_back(readProgram((*programs)[i], path, defaults, c));
  }
  return out;
}

}  // namespace

uint64_t chunkSlots(Collective c, int nranks, uint64_t chunksPerBlock, uint64_t scratchBlocks) {
  // Each factor is below 2^32, so the blocks of a rank times chunks per block fit in 64 bits; so does
  // that times nranks (< 2^17) unless the chunks alone are past 2^47, which then saturates.
  const uint64_t perRank =
      (uint64_t{inputBlocks(c, nranks)} + outputBlocks(c, nranks) + scratchBlocks) * chunksPerBlock;
  const uint64_t n = static_cast<uint64_t>(std::max(nranks, 0));
  return n != 0 && perRank > UINT64_MAX / n ? UINT64_MAX : perRank * n;
}

Result<std::string> readScheduleFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return invalidArgument("%s: cannot open: %s", path.c_str(), strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxScheduleFileBytes) {
      fclose(f);
      return invalidArgument("%s: larger than the %zu-byte limit for schedule files", path.c_str(),
                             kMaxScheduleFileBytes);
    }
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) return invalidArgument("%s: read error", path.c_str());
  return text;
}

Result<std::shared_ptr<FixedSchedule>> parseJsonSchedule(const std::string& text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t close = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
    return invalidArgument("%s: JSON syntax error: %s", path.c_str(), what.c_str());
  }
  ScheduleInfo info;
  info.path = path;
  info.kind = SourceKind::kJson;
  info.contentHash = fnv1a(text);
  Collective c = Collective::kAllReduce;
  std::vector<FixedProgram> programs;
  try {
    requireObject(doc, "", kTopFields);
    readHeader(doc, &info, &c);
    programs = readPrograms(doc, c);
  } catch (const JsonError& e) {
    return invalidArgument("%s: %s: %s", path.c_str(), e.path.c_str(), e.message.c_str());
  } catch (const std::exception& e) {  // e.g. bad_alloc; nothing else is expected here
    return invalidArgument("%s: %s", path.c_str(), e.what());
  }
  TH_ASSIGN(std::shared_ptr<FixedSchedule> s, FixedSchedule::create(std::move(info), c, std::move(programs)));
  return s;
}

Result<std::shared_ptr<FixedSchedule>> loadJsonSchedule(const std::string& path) {
  TH_ASSIGN(std::string text, readScheduleFile(path));
  return parseJsonSchedule(text, path);
}

}  // namespace theseus::schedule::user
