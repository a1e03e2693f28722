// Malformed JSON schedules: each mistake is rejected with the file name, the
// JSON pointer (or rank + step and its pointer) and the specific problem.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedule/user/json_schedule.h"

namespace theseus::schedule::user {
namespace {

struct Case {
  const char* what;
  std::string doc;
  std::vector<std::string> expect;  // substrings of the error
};

// A valid 2-rank allreduce whose pieces the cases below replace.
std::string doc(const std::string& header, const std::string& rank0, const std::string& rank1) {
  return "{\"version\": 1, \"name\": \"t\", \"collective\": \"allreduce\", \"nranks\": 2" + header +
         ", \"ranks\": [[" + rank0 + "], [" + rank1 + "]]}";
}
const std::string kSend0 = R"({"op": "send", "peer": 1, "src": "input[0]"})";
const std::string kRR0 = R"({"op": "recv_reduce", "peer": 1, "src": "input[0]", "dst": "output[0]"})";
const std::string kSend1 = R"({"op": "send", "peer": 0, "src": "input[0]"})";
const std::string kRR1 = R"({"op": "recv_reduce", "peer": 0, "src": "input[0]", "dst": "output[0]"})";
std::string good0() { return kSend0 + ", " + kRR0; }
std::string good1() { return kSend1 + ", " + kRR1; }
std::string with0(const std::string& step) { return step + ", " + kRR0; }

std::vector<Case> cases() {
  return {
      {"valid", doc("", good0(), good1()), {}},
      {"syntax error", "{\"version\": 1,\n \"name\": }", {"JSON syntax error", "line 2"}},
      {"not an object", "[1, 2]", {"/: expected an object, got an array"}},
      {"missing version", R"({"name": "t", "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"/: missing required field \"version\""}},
      {"wrong version", R"({"version": 2, "name": "t", "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"/version: unsupported format version 2 (this Theseus reads version 1)"}},
      {"version as string", R"({"version": "1", "name": "t", "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"/version: expected an integer, got a string"}},
      {"missing name", R"({"version": 1, "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"missing required field \"name\""}},
      {"bad name", R"({"version": 1, "name": "my sched", "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"/name: schedule name 'my sched' contains ' '"}},
      {"built-in name", R"({"version": 1, "name": "ring", "collective": "allreduce", "nranks": 1, "ranks": [[]]})",
       {"/name: schedule name 'ring' is taken by a built-in schedule"}},
      {"unknown collective", R"({"version": 1, "name": "t", "collective": "allsum", "nranks": 1, "ranks": [[]]})",
       {"/collective: unknown collective \"allsum\""}},
      {"unknown top-level field", doc(", \"nrank\": 2", good0(), good1()), {"/nrank: unknown field \"nrank\""}},
      {"nranks as string",
       R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": "2", "ranks": [[], []]})",
       {"/nranks: expected an integer, got a string"}},
      {"nranks zero", R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 0, "ranks": []})",
       {"/nranks: 0 is out of range 1..65536"}},
      {"missing nranks", R"({"version": 1, "name": "t", "collective": "allreduce", "ranks": [[]]})",
       {"missing required field \"nranks\""}},
      {"missing ranks", R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 1})",
       {"missing required field \"ranks\""}},
      // 9 KB of empty alltoall ranks took 4 GB and 9 s in the verifier before the chunk-slot limit.
      {"too many chunk slots", R"({"version": 1, "name": "t", "collective": "alltoall", "nranks": 3000, "ranks": []})",
       {"/: 3000 ranks with 6000 chunks each (input, output and scratch) are 18000000 chunk slots, more than the 4194304"}},
      {"too few ranks", R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 2, "ranks": [[]]})",
       {"/ranks: has 1 entries but nranks is 2"}},
      {"unknown op", doc("", with0(R"({"op": "sendd", "peer": 1, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/op: unknown op \"sendd\" (known: send, recv, recv_reduce, copy, reduce"}},
      {"op not a string", doc("", with0(R"({"op": 3, "peer": 1, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/op: expected a string, got an integer"}},
      {"peer out of range", doc("", with0(R"({"op": "send", "peer": 5, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/peer: peer 5 is out of range for 2 ranks"}},
      {"peer is self", doc("", with0(R"({"op": "send", "peer": 0, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/peer: peer 0 is this rank itself"}},
      {"negative peer", doc("", with0(R"({"op": "send", "peer": -1, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/peer: -1 is out of range"}},
      {"missing peer", doc("", with0(R"({"op": "send", "src": "input[0]"})"), good1()),
       {"/ranks/0/0: missing required field \"send_peer\""}},
      {"peer on a fused op",
       doc("", with0(R"({"op": "recv_reduce_send", "peer": 1, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/peer: op recv_reduce_send has two peers; use \"recv_peer\" and \"send_peer\""}},
      {"recv_peer on send", doc("", with0(R"({"op": "send", "peer": 1, "recv_peer": 1, "src": "input[0]"})"), good1()),
       {"/ranks/0/0/recv_peer: op send does not receive; remove \"recv_peer\""}},
      {"dst on send", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[0]", "dst": "output[0]"})"), good1()),
       {"/ranks/0/0/dst: op send writes no destination; remove \"dst\""}},
      {"missing src", doc("", with0(R"({"op": "send", "peer": 1})"), good1()),
       {"/ranks/0/0: missing required field \"src\""}},
      {"chunk out of range (compact)", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[1]"})"), good1()),
       {"/ranks/0/0/src: input chunks [1,2) are out of range: the input buffer has 1 chunks (1 blocks of 1)"}},
      {"chunk out of range (object)",
       doc("", with0(R"({"op": "send", "peer": 1, "src": {"buf": "input", "chunk": 0, "count": 3}})"), good1()),
       {"/ranks/0/0/src: input chunks [0,3) are out of range"}},
      {"negative chunk",
       doc("", with0(R"({"op": "send", "peer": 1, "src": {"buf": "input", "chunk": -2}})"), good1()),
       {"/ranks/0/0/src/chunk: -2 is out of range"}},
      {"fractional chunk",
       doc("", with0(R"({"op": "send", "peer": 1, "src": {"buf": "input", "chunk": 0.5}})"), good1()),
       {"/ranks/0/0/src/chunk: expected an integer, got a non-integer number"}},
      {"bad compact range", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[0"})"), good1()),
       {"/ranks/0/0/src: \"input[0\" is not a chunk range"}},
      {"empty compact range", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[1:1]"})"), good1()),
       {"/ranks/0/0/src: \"input[1:1]\" is an empty chunk range"}},
      {"unknown buffer", doc("", with0(R"({"op": "send", "peer": 1, "src": "inptu[0]"})"), good1()),
       {"/ranks/0/0/src: unknown buffer \"inptu\" (expected input, output or scratch)"}},
      {"unknown range field",
       doc("", with0(R"({"op": "send", "peer": 1, "src": {"buf": "input", "chunk": 0, "size": 1}})"), good1()),
       {"/ranks/0/0/src/size: unknown field \"size\""}},
      {"scratch without scratch blocks", doc("", with0(R"({"op": "send", "peer": 1, "src": "scratch[0]"})"), good1()),
       {"/ranks/0/0/src: uses the scratch buffer but the program declares no scratch blocks"}},
      {"channel out of range", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[0]", "channel": 1})"), good1()),
       {"/ranks/0/0/channel: channel 1 is out of range: the program has 1 channel(s)"}},
      {"channels too many", doc(", \"channels\": 33", good0(), good1()), {"/channels: 33 is out of range 1..32"}},
      {"forward dep", doc("", kSend0 + R"(, {"op": "recv_reduce", "peer": 1, "src": "input[0]", "dst": "output[0]",
                                      "deps": [1]})", good1()),
       {"/ranks/0/1/deps/0: dep 1 is not an earlier step of this rank (this is step 1)"}},
      {"deps not an array", doc("", kSend0 + R"(, {"op": "recv_reduce", "peer": 1, "src": "input[0]",
                                           "dst": "output[0]", "deps": 0})", good1()),
       {"/ranks/0/1/deps: expected an array of earlier step indices, got an integer"}},
      {"unknown step field", doc("", with0(R"({"op": "send", "peer": 1, "src": "input[0]", "chanel": 0})"), good1()),
       {"/ranks/0/0/chanel: unknown field \"chanel\""}},
      {"bad in_place", doc(", \"in_place\": \"yes\"", good0(), good1()),
       {"/in_place: expected true, false or \"both\", got \"yes\""}},
      {"bad size_range", doc(", \"size_range\": [10, 5]", good0(), good1()),
       {"/size_range: min_bytes 10 is larger than max_bytes 5"}},
      {"steps not an array", R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 1, "ranks": [3]})",
       {"/ranks/0: expected an array of steps, got an integer"}},
      {"ranks and programs", R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 1, "ranks": [[]],
                                 "programs": []})",
       {"\"ranks\" belongs inside each entry of \"programs\""}},
      {"two programs for one request",
       R"({"version": 1, "name": "t", "collective": "allgather", "in_place": "both", "programs": [
           {"nranks": 1, "ranks": [[{"op": "copy", "src": "input[0]", "dst": "output[0]"}]]},
           {"nranks": 1, "in_place": false, "ranks": [[{"op": "copy", "src": "input[0]", "dst": "output[0]"}]]}]})",
       {"program /programs/0 and program /programs/1 both serve allgather nranks=1"}},
      {"reduction in a non-reducing collective",
       R"({"version": 1, "name": "t", "collective": "allgather", "nranks": 1,
           "ranks": [[{"op": "reduce", "src": "input[0]", "dst": "output[0]"}]]})",
       {"rank 0 step 0 (reduce): reduces data, but allgather is not a reducing collective", "(at /ranks/0/0)"}},
      // Verifier errors: rank + step, their JSON pointer, and the problem.
      {"deadlock", doc("", kRR0 + R"(, {"op": "send", "peer": 1, "src": "output[0]"})",
                       kRR1 + R"(, {"op": "send", "peer": 0, "src": "output[0]"})"),
       {"t.json: schedule t allreduce nranks=2", "deadlock", "(at /ranks/"}},
      {"unmatched message", doc("", good0() + R"(, {"op": "send", "peer": 1, "src": "output[0]"})", good1()),
       {"rank 0 step 2 (send to rank 1, channel 0): send without a matching receive", "(at /ranks/0/2)"}},
      {"unwritten output", doc(", \"scratch_blocks\": 1", kSend0, R"({"op": "recv", "peer": 0, "dst": "scratch[0]"})"),
       {"rank 0 output chunk 0 is never written; allreduce needs {r0:c0, r1:c0}"}},
      {"double count", doc("", good0() + R"(, {"op": "reduce", "src": "input[0]", "dst": "output[0]"})", good1()),
       {"rank 0 step 2 (reduce)", "(at /ranks/0/2)"}},
      // Correct, but the executor scales raw input once per reduction and
      // cannot read chunk 0 (reduced) and chunk 1 (raw) in one step.
      {"mixed raw and reduced read",
       R"({"version": 1, "name": "t", "collective": "allreduce", "nranks": 2, "chunks_per_block": 2,
           "scratch_blocks": 1, "in_place": true, "ranks": [
           [{"op": "recv_reduce", "peer": 1, "src": "output[0]", "dst": "output[0]"},
            {"op": "send", "peer": 1, "src": "output[0:2]"}, {"op": "recv", "peer": 1, "dst": "output[1]"}],
           [{"op": "send", "peer": 0, "src": "output[0]"}, {"op": "recv", "peer": 0, "dst": "scratch[0:2]"},
            {"op": "copy", "src": "scratch[0]", "dst": "output[0]"},
            {"op": "reduce", "src": "scratch[1]", "dst": "output[1]"}, {"op": "send", "peer": 0, "src": "output[1]"}]
         ]})",
       {"the executor cannot run it", "rank 0 step 1 reads a range that is partly raw input and partly partial results",
        "(at /ranks/0/1)"}},
      {"valid out of place, deadlock in place",
       doc(", \"in_place\": \"both\"",
           R"({"op": "recv", "peer": 1, "dst": "output[0]"}, {"op": "send", "peer": 1, "src": "input[0]"},
              {"op": "reduce", "src": "input[0]", "dst": "output[0]"})",
           R"({"op": "recv", "peer": 0, "dst": "output[0]"}, {"op": "send", "peer": 0, "src": "input[0]"},
              {"op": "reduce", "src": "input[0]", "dst": "output[0]"})"),
       {"schedule t allreduce nranks=2 in-place", "deadlock"}},
  };
}

TEST(JsonErrors, EachMistakeGetsItsOwnMessage) {
  for (const Case& c : cases()) {
    auto r = parseJsonSchedule(c.doc, "t.json");
    if (c.expect.empty()) {
      EXPECT_TRUE(r.isOk()) << c.what << ": " << r.status().message();
      continue;
    }
    ASSERT_FALSE(r.isOk()) << c.what << " was accepted:\n" << c.doc;
    EXPECT_EQ(r.status().code(), ncclInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("t.json: ", 0), 0u) << c.what << ": " << m;
    for (const std::string& want : c.expect) EXPECT_NE(m.find(want), std::string::npos) << c.what << ":\n  " << m
                                                                                          << "\nwants: " << want;
  }
}

TEST(JsonErrors, RankEntryMustMatchItsPosition) {
  std::string d = R"({"version": 1, "name": "t", "collective": "allgather", "nranks": 1,
                      "ranks": [{"rank": 1, "steps": []}]})";
  auto r = parseJsonSchedule(d, "t.json");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("/ranks/0/rank: this is entry 0 of \"ranks\", so it must be rank 0"),
            std::string::npos)
      << r.status().message();
}

TEST(JsonErrors, MissingFileAndWrongTypeOfFile) {
  auto r = loadJsonSchedule("/nonexistent/x.json");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("/nonexistent/x.json: cannot open: No such file"), std::string::npos);
  auto e = loadFile("/tmp/whatever.yaml");
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("unknown schedule file type (expected .json, .xml or .so)"), std::string::npos);
}

}  // namespace
}  // namespace theseus::schedule::user
