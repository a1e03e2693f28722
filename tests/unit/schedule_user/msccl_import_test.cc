// MSCCL XML import: the examples (verified, run on numbers, including units
// that do not divide into the chunks, which exercises the scratch re-layout),
// the mapping of thread blocks, nops and deps, and every rejection.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference_interpreter.h"
#include "schedule/user/msccl_import.h"
#include "schedule/verifier.h"

namespace theseus::schedule::user {
namespace {

const std::string kExamples = THESEUS_EXAMPLES_DIR;

GenerateRequest request(Collective c, int n, bool inPlace) {
  GenerateRequest req;
  req.collective = c;
  req.nranks = n;
  req.inPlace = inPlace;
  return req;
}

void expectRuns(const FixedSchedule& s, Collective c, int n) {
  for (bool inPlace : {false, true}) {
    SCOPED_TRACE(s.name() + (inPlace ? " in-place" : " out-of-place"));
    Result<Program> p = s.generate(request(c, n, inPlace));
    ASSERT_TRUE(p.isOk()) << p.status().message();
    Status st = verifyProgram(p.value());
    ASSERT_TRUE(st.isOk()) << st.message();
    for (size_t unit : {1, 4, 5, 7, 1001})
      EXPECT_EQ(testing::runAndCheck(p.value(), unit, static_cast<unsigned>(unit) + 3), "") << "unit " << unit;
  }
}

TEST(MscclExamples, AllPairsAllreduceWithScratchAndNops) {
  auto s = loadMscclXml(kExamples + "/allreduce_allpairs_4.xml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s.value()->name(), "allpairs_allreduce_4");
  EXPECT_EQ(s.value()->info().kind, SourceKind::kMscclXml);
  EXPECT_EQ(s.value()->programs()[0].layout, Layout::kBoth);
  expectRuns(*s.value(), Collective::kAllReduce, 4);
  const Program& p = s.value()->programs()[0].program;
  // The three peer contributions to chunk r sit at position r of three
  // different scratch blocks (MSCCL used scratch chunks 0, 1, 2).
  EXPECT_EQ(p.scratchBlocks, 3u);
  std::vector<uint32_t> slots;
  for (const Step& st : p.ranks[1].steps)
    if (st.op == Op::kRecv && st.dst.buf == Buf::kScratch) slots.push_back(st.dst.first);
  EXPECT_EQ(slots, (std::vector<uint32_t>{1, 5, 9}));
  // The allgather sends wait (through the nop) for the last reduction.
  const std::vector<Step>& r0 = p.ranks[0].steps;
  int lastReduce = -1;
  for (size_t i = 0; i < r0.size(); ++i)
    if (r0[i].op == Op::kReduce) lastReduce = static_cast<int>(i);
  ASSERT_GE(lastReduce, 0);
  int sendsAfterReduce = 0;
  for (const Step& st : r0)
    if (st.op == Op::kSend && st.src.buf == Buf::kOutput) {
      EXPECT_EQ(st.deps, std::vector<uint32_t>{static_cast<uint32_t>(lastReduce)});
      ++sendsAfterReduce;
    }
  EXPECT_EQ(sendsAfterReduce, 3);
}

TEST(MscclExamples, RingAllreduceWithFusedTypes) {
  auto s = loadMscclXml(kExamples + "/allreduce_ring_4.xml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  expectRuns(*s.value(), Collective::kAllReduce, 4);
  const std::vector<Step>& r2 = s.value()->programs()[0].program.ranks[2].steps;
  std::vector<Op> ops;
  for (const Step& st : r2) ops.push_back(st.op);
  EXPECT_EQ(ops, (std::vector<Op>{Op::kSend, Op::kRecvReduceSend, Op::kRecvReduceSend, Op::kRecvReduceCopySend,
                                  Op::kRecvCopySend, Op::kRecvCopySend, Op::kRecv}));
  EXPECT_EQ(r2[0].sendPeer, 3);
  EXPECT_EQ(r2[1].recvPeer, 1);
}

std::string step(int s, const char* type, const char* sb, int so, const char* db, int dof, int cnt = 1,
                 int depid = -1, int deps = -1) {
  char text[256];
  snprintf(text, sizeof(text),
           "<step s=\"%d\" type=\"%s\" srcbuf=\"%s\" srcoff=\"%d\" dstbuf=\"%s\" dstoff=\"%d\" cnt=\"%d\" "
           "depid=\"%d\" deps=\"%d\" hasdep=\"0\"/>",
           s, type, sb, so, db, dof, cnt, depid, deps);
  return text;
}

// A 2-GPU allgather: each GPU copies its input, sends it and receives the
// other's, all in one thread block (send then receive from the same peer).
std::string allgather2(const std::string& extraGpu0 = "", const std::string& algoAttrs = "") {
  std::string x = "<algo name=\"ag2\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"2\" "
                  "coll=\"allgather\" inplace=\"0\"" + algoAttrs + ">\n";
  for (int g = 0; g < 2; ++g) {
    int peer = 1 - g;
    x += "<gpu id=\"" + std::to_string(g) + "\" i_chunks=\"1\" o_chunks=\"2\" s_chunks=\"0\">\n";
    x += "<tb id=\"0\" send=\"" + std::to_string(peer) + "\" recv=\"" + std::to_string(peer) + "\" chan=\"0\">\n";
    x += step(0, "cpy", "i", 0, "o", g) + "\n" + step(1, "s", "i", 0, "o", g) + "\n" + step(2, "r", "i", 0, "o", peer);
    x += "\n</tb>\n" + (g == 0 ? extraGpu0 : "") + "</gpu>\n";
  }
  return x + "</algo>\n";
}

TEST(MscclImport, SendThenReceiveInOneThreadBlockIsNotADeadlock) {
  auto s = parseMscclXml(allgather2(), "ag2.xml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  Result<Program> p = s.value()->generate(request(Collective::kAllGather, 2, false));
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(testing::runAndCheck(p.value(), 3), "");
  // No explicit deps: thread block order is left to the IR's hazards.
  for (const Step& st : p.value().ranks[0].steps) EXPECT_TRUE(st.deps.empty());
}

TEST(MscclImport, NopChainsBecomeDepsOfTheNextRealStep) {
  // GPU 0 gets a second thread block whose send waits (through two nops) for
  // the copy and the receive of thread block 0.
  std::string extra = "<tb id=\"1\" send=\"-1\" recv=\"-1\" chan=\"-1\">" + step(0, "nop", "i", -1, "o", -1, 0, 0, 0) +
                      step(1, "nop", "i", -1, "o", -1, 0, 0, 2) + step(2, "cpy", "o", 1, "o", 1, 1) + "</tb>";
  auto s = parseMscclXml(allgather2(extra), "ag2.xml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  const std::vector<Step>& r0 = s.value()->programs()[0].program.ranks[0].steps;
  ASSERT_EQ(r0.size(), 4u);
  EXPECT_EQ(r0[3].op, Op::kCopy);
  EXPECT_EQ(r0[3].deps, (std::vector<uint32_t>{0, 2}));
}

TEST(MscclImport, NamesAreSanitized) {
  std::string x = allgather2();
  x.replace(x.find("name=\"ag2\""), 10, "name=\"my algo (v2)\"");
  auto s = parseMscclXml(x, "ag2.xml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s.value()->name(), "my_algo__v2_");
  EXPECT_NE(s.value()->info().description.find("my algo (v2)"), std::string::npos);
}

struct Bad {
  const char* what;
  std::string xml;
  std::vector<std::string> expect;
};

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::vector<Bad> badCases() {
  const std::string ok = allgather2();
  return {
      {"syntax", "<algo name=\"x\"><gpu></algo>", {"bad.xml:1: XML syntax error"}},
      {"root element", "<algorithm/>", {"the root element must be <algo> (got <algorithm>)"}},
      {"missing ngpus", replaced(ok, " ngpus=\"2\"", ""), {"bad.xml:1: <algo>: missing attribute ngpus"}},
      {"not an integer", replaced(ok, "nchannels=\"1\"", "nchannels=\"one\""),
       {"<algo>: nchannels=\"one\" is not an integer"}},
      {"custom collective", replaced(ok, "coll=\"allgather\"", "coll=\"custom\""),
       {"coll=\"custom\" is not supported"}},
      {"alltoallv", replaced(ok, "coll=\"allgather\"", "coll=\"alltoallv\""), {"coll=\"alltoallv\" is not supported"}},
      {"unsupported step type", replaced(ok, "type=\"cpy\"", "type=\"res\""),
       {"gpu 0 tb 0 step 0: step type \"res\" is not supported (supported: s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)"}},
      {"bad buffer", replaced(ok, "srcbuf=\"i\"", "srcbuf=\"x\""), {"gpu 0 tb 0 step 0: srcbuf=\"x\" is not a buffer"}},
      {"offset out of range", replaced(ok, "dstoff=\"1\"", "dstoff=\"2\""),
       {"gpu 0 tb 0 step 2: destination o[2:3] is out of range: gpu 0 declares o_chunks=2"}},
      {"unknown element", replaced(ok, "</tb>", "<foo/></tb>"), {"gpu 0 tb 0: unsupported element <foo> (expected <step>)"}},
      {"steps out of order", replaced(ok, "<step s=\"1\"", "<step s=\"5\""),
       {"gpu 0 tb 0 step 1: s=5, but steps of a thread block must be numbered 0, 1, 2, ... in order"}},
      {"send without send peer", replaced(ok, "send=\"1\"", "send=\"-1\""),
       {"gpu 0 tb 0 step 1: type \"s\" sends but the thread block has send=-1"}},
      {"peer is self", replaced(ok, "send=\"1\"", "send=\"0\""), {"a thread block cannot talk to its own gpu"}},
      {"channel out of range", replaced(ok, "chan=\"0\"", "chan=\"3\""), {"chan=3 is out of range -1..0"}},
      {"dep on a missing thread block", replaced(ok, "depid=\"-1\" deps=\"-1\"", "depid=\"4\" deps=\"0\""),
       {"gpu 0 tb 0 step 0: depid=4 names no thread block of gpu 0"}},
      {"dep on a missing step", replaced(ok, "depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"9\""),
       {"deps=9, but thread block 0 has 3 steps"}},
      {"half a dep", replaced(ok, "depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"-1\""),
       {"depid=0 and deps=-1 must both be -1 or both name a step"}},
      {"dependency cycle", replaced(ok, "depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"2\""),
       {"gpu 0: dependency cycle: tb 0 step 0 (line", "waits for tb 0 step 2"}},
      {"two thread blocks per peer and channel",
       replaced(ok, "</gpu>", "<tb id=\"1\" send=\"1\" recv=\"-1\" chan=\"0\"></tb></gpu>"),
       {"gpu 0: thread blocks 0 and 1 both send to gpu 1 on channel 0"}},
      {"duplicate thread block", replaced(ok, "</gpu>", "<tb id=\"0\" send=\"-1\" recv=\"-1\" chan=\"0\"></tb></gpu>"),
       {"gpu 0: duplicate thread block id 0"}},
      {"chunks per loop not a multiple", replaced(ok, "nchunksperloop=\"2\"", "nchunksperloop=\"3\""),
       {"nchunksperloop=3 must be a multiple of 2"}},
      {"chunk counts do not match", replaced(ok, "o_chunks=\"2\"", "o_chunks=\"3\""),
       {"gpu 0: o_chunks=3, but allgather on 2 gpus with nchunksperloop=2 has 2 output chunks (or 0)"}},
      {"missing gpu", ok.substr(0, ok.find("<gpu id=\"1\"")) + "</algo>", {"ngpus=2 but there is no <gpu id=\"1\">"}},
      {"no layout", replaced(ok, "inplace=\"0\"", "inplace=\"0\" outofplace=\"0\""), {"the algorithm serves no layout"}},
      {"unsupported redop", allgather2("", " redop=\"avg\""), {"redop=\"avg\" is not supported"}},
      // 2^31 scratch chunks made the scratch re-layout allocate gigabytes before the chunk-slot limit.
      {"too many chunk slots",
       "<algo name=\"big\" nchannels=\"1\" nchunksperloop=\"65536\" ngpus=\"1\" coll=\"allreduce\" inplace=\"0\">"
       "<gpu id=\"0\" i_chunks=\"0\" o_chunks=\"0\" s_chunks=\"2147483647\"></gpu></algo>",
       {"1 gpus with 2147614720 chunks each", "more than the 4194304 a schedule may have"}},
      // Found by the verifier after lowering: location of the step in the XML.
      {"wrong result", replaced(ok, "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"1\"",
                                "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\""),
       {"MSCCL algo 'ag2': schedule ag2 allgather nranks=2: rank 0 output chunk 0 holds {r1:c0} but allgather needs"}},
      {"unmatched send", replaced(ok, "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"1\"",
                                  "type=\"s\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"1\""),
       {"rank 0 step 2 (send to rank 1, channel 0): send without a matching receive", "(at gpu 0 tb 0 step 2, line "}},
  };
}

TEST(MscclImport, RejectionsSayWhatAndWhere) {
  for (const Bad& b : badCases()) {
    auto r = parseMscclXml(b.xml, "bad.xml");
    ASSERT_FALSE(r.isOk()) << b.what << " was accepted";
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("bad.xml", 0), 0u) << b.what << ": " << m;
    for (const std::string& want : b.expect)
      EXPECT_NE(m.find(want), std::string::npos) << b.what << ":\n  " << m << "\nwants: " << want;
  }
}

TEST(MscclImport, DataMustKeepItsPositionInTheBlock) {
  // Allreduce with 2 chunks per block where GPU 0 reduces its chunk 0 into
  // output chunk 1: different positions, which the IR cannot express.
  std::string x = "<algo name=\"bad\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"1\" coll=\"allreduce\" "
                  "inplace=\"0\"><gpu id=\"0\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"1\">"
                  "<tb id=\"0\" send=\"-1\" recv=\"-1\" chan=\"0\">" +
                  step(0, "cpy", "i", 0, "s", 0) + step(1, "cpy", "s", 0, "o", 1) + "</tb></gpu></algo>";
  auto r = parseMscclXml(x, "bad.xml");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("moves data between chunks at different positions of their blocks"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("gpu 0 tb 0 step 1"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace theseus::schedule::user
