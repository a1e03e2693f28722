// Hand-made broken programs, each rejected with its specific error; hand-made
// valid ones (including in-place layouts) accepted; and a mutation test: any
// mutated built-in the verifier accepts must compute the right numbers.
#include <gtest/gtest.h>

#include <random>

#include "program_helpers.h"
#include "reference_interpreter.h"
#include "schedule/builtins.h"
#include "schedule/verifier.h"

namespace theseus::schedule {
namespace {

using namespace testing;  // NOLINT: the short constructors of program_helpers.h

void expectRejected(const Program& p, const std::vector<std::string>& parts) {
  Status st = verifyProgram(p);
  ASSERT_FALSE(st.isOk()) << "accepted a broken program";
  EXPECT_EQ(st.code(), ncclInvalidArgument);
  for (const std::string& part : parts) EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
}

// Two-rank allreduce: each sends its input and adds the peer's into its output.
Program goodAllreduce() {
  return program(Collective::kAllReduce, {{send(1, in(0)), recvReduce(1, in(0), out(0))},
                                          {send(0, in(0)), recvReduce(0, in(0), out(0))}});
}

TEST(Verifier, AcceptsHandMadePrograms) {
  EXPECT_TRUE(verifyProgram(goodAllreduce()).isOk());
  // In-place allgather: the own block is already in place.
  Program ag = program(Collective::kAllGather, {{send(1, in(0)), recv(1, out(1))}, {send(0, in(0)), recv(0, out(0))}},
                       1, 0, true);
  EXPECT_TRUE(verifyProgram(ag).isOk()) << verifyProgram(ag).message();
  // In-place reduce-scatter: the output is input block `rank`.
  Program rs = program(Collective::kReduceScatter, {{send(1, in(1)), recvReduce(1, in(0), out(0))},
                                                    {send(0, in(0)), recvReduce(0, out(0), out(0))}},
                       1, 0, true);
  EXPECT_TRUE(verifyProgram(rs).isOk()) << verifyProgram(rs).message();
  // One rank, in place: nothing to do.
  EXPECT_TRUE(verifyProgram(program(Collective::kAllReduce, {{}}, 1, 0, true)).isOk());
}

TEST(Verifier, RejectsWrongResult) {
  Program p = goodAllreduce();
  p.ranks[1].steps[1] = recv(0, out(0));
  expectRejected(p, {"rank 1 output chunk 0 holds {r0:c0} but allreduce needs contributions of all 2 ranks",
                     "missing r1:c0"});
  // In place, receiving over the own block loses the own input.
  Program ag = program(Collective::kAllGather, {{send(1, in(0)), recv(1, out(0))}, {send(0, in(0)), recv(0, out(0))}},
                       1, 0, true);
  expectRejected(ag, {"rank 0 output chunk 0 holds {r1:c0} but allgather needs {r0:c0}"});
}

TEST(Verifier, RejectsUnwrittenOutputChunk) {
  Program p = program(Collective::kAllGather, {{copy(in(0), out(0))}, {copy(in(0), out(1))}});
  expectRejected(p, {"rank 0 output chunk 1 is never written; allgather needs {r1:c0}"});
}

TEST(Verifier, RejectsDoubleCountedContribution) {
  Program p = goodAllreduce();
  p.ranks[0].steps.push_back(reduce(in(0), out(0)));
  expectRejected(p, {"rank 0 step 2 (reduce): double-counted contribution: r0:c0 is already in output chunk 0"});
}

TEST(Verifier, RejectsUnmatchedMessages) {
  Program p = goodAllreduce();
  p.ranks[0].steps.push_back(send(1, in(0)));
  expectRejected(p, {"rank 0 step 2 (send to rank 1, channel 0): send without a matching receive",
                     "rank 0 sends 2 message(s) to rank 1 on channel 0 but rank 1 receives 1"});
  Program q = goodAllreduce();
  q.ranks[1].steps.insert(q.ranks[1].steps.begin(), recv(0, out(0)));
  expectRejected(q, {"receive without a matching send: rank 0 sends 1 message(s) to rank 1 on channel 0 but rank 1 "
                     "receives 2"});
}

TEST(Verifier, RejectsDeadlockCycle) {
  // Each rank receives before it sends (explicit dep): a wait-for cycle.
  Step late = send(1, in(0));
  late.deps = {1};
  Step late0 = send(0, in(0));
  late0.deps = {1};
  Program p = program(Collective::kAllGather,
                      {{copy(in(0), out(0)), recv(1, out(1)), late}, {copy(in(0), out(1)), recv(0, out(0)), late0}});
  expectRejected(p, {"deadlock under rendezvous: wait-for cycle rank 0 step 1 (recv from rank 1, channel 0) [waits for "
                     "its matching send] -> rank 1 step 2 (send to rank 0, channel 0) [waits for step 1 to complete]",
                     "back to rank 0 step 1", "blocked: rank 0 steps 1,2; rank 1 steps 1,2"});
}

TEST(Verifier, RejectsHazardDeadlockOfReceivingIntoTheBufferBeingSent) {
  // Exchange in place: the receive overwrites what is being sent, so it waits
  // for the send, which waits for the peer's receive, which waits for its send.
  auto rank = [](int peer) {
    return std::vector<Step>{copy(in(0), out(0)), send(peer, out(0)), recvReduce(peer, out(0), out(0))};
  };
  Program p = program(Collective::kAllReduce, {rank(1), rank(0)});
  expectRejected(p, {"deadlock", "[waits for step 1 to complete]", "[waits for its receiver to be ready]"});
}

TEST(Verifier, RejectsPeersOutOfRange) {
  Program p = goodAllreduce();
  p.ranks[0].steps[0].sendPeer = 5;
  expectRejected(p, {"rank 0 step 0 (send to rank 5, channel 0): send peer 5 is out of range for 2 ranks"});
  p.ranks[0].steps[0].sendPeer = 0;
  expectRejected(p, {"send peer is the rank itself"});
  p = goodAllreduce();
  p.ranks[1].steps[1].recvPeer = -1;
  expectRejected(p, {"rank 1 step 1 (recv_reduce from rank -1, channel 0): receive peer -1 is out of range"});
  p = goodAllreduce();
  p.ranks[1].steps[0].recvPeer = 0;
  expectRejected(p, {"receive peer is 0 but the op does not use it (must be -1)"});
}

TEST(Verifier, RejectsChunksOutOfRange) {
  Program p = goodAllreduce();
  p.ranks[1].steps[1].dst = out(3);
  expectRejected(p, {"rank 1 step 1 (recv_reduce from rank 0, channel 0): dst output chunk 3 is out of range: the "
                     "output buffer has 1 chunks (1 blocks of 1)"});
  p = goodAllreduce();
  p.ranks[0].steps[0].src = in(0, 0);
  expectRejected(p, {"src is an empty chunk range"});
  p = goodAllreduce();
  p.ranks[0].steps[0].src = scr(0);
  expectRejected(p, {"src uses scratch chunk 0 but the program declares no scratch blocks"});
  p.scratchBlocks = 1;
  p.ranks[0].steps[0].src = scr(1);
  expectRejected(p, {"src scratch chunk 1 is out of range: the scratch buffer has 1 chunks"});
}

TEST(Verifier, RejectsSizeMismatch) {
  Program p = program(Collective::kAllReduce, {{send(1, in(0, 2)), recvReduce(1, in(0, 2), out(0, 2))},
                                               {recv(0, scr(0, 1)), send(0, in(0, 2)), reduce(in(0, 2), out(0, 2))}},
                      2, 1);
  expectRejected(p, {"rank 0 step 0 (send to rank 1, channel 0): size mismatch: sends 2 chunk(s) from sub-chunk 0 "
                     "(input chunks [0,2)) but its matching receive, rank 1 step 0 (recv from rank 0, channel 0), "
                     "takes 1 chunk(s) from sub-chunk 0 (scratch chunk 0)"});
  p.ranks[0].steps[0].src = in(1);
  p.ranks[1].steps[0].dst = scr(0);
  expectRejected(p, {"sends 1 chunk(s) from sub-chunk 1", "takes 1 chunk(s) from sub-chunk 0"});
  // Two-operand ops need equal geometry too.
  Program q = goodAllreduce();
  q.chunksPerBlock = 2;
  q.ranks[0].steps[1].src = in(1);
  expectRejected(q, {"size mismatch: src input chunk 1 and dst output chunk 0 differ"});
}

TEST(Verifier, RejectsUninitialisedReads) {
  Program p = goodAllreduce();
  p.scratchBlocks = 1;
  p.ranks[0].steps[0].src = scr(0);
  expectRejected(p, {"rank 0 step 0 (send to rank 1, channel 0): reads scratch chunk 0, which holds nothing yet"});
  Program q = goodAllreduce();
  q.ranks[0].steps[0].src = out(0);
  expectRejected(q, {"reads output chunk 0, which holds nothing yet"});
}

TEST(Verifier, RejectsOtherStructuralErrors) {
  Program p = goodAllreduce();
  p.ranks[0].steps[0].channel = 1;
  expectRejected(p, {"channel 1 is out of range: the program has 1 channels"});
  p = goodAllreduce();
  p.ranks[0].steps[0].deps = {1};
  expectRejected(p, {"rank 0 step 0 (send to rank 1, channel 0): dep 1 is not an earlier step of rank 0"});
  p = goodAllreduce();
  p.ranks[1].steps[1].dst = in(0);
  expectRejected(p, {"dst writes the input buffer, which is read-only here (out-of-place)"});
  Program b = program(Collective::kBroadcast, {{send(1, in(0))}, {recv(0, out(0)), send(0, in(0))}});
  expectRejected(b, {"rank 1 step 1 (send to rank 0, channel 0): src uses the input buffer, which broadcast does not "
                     "have on non-root rank 1 (root is 0)"});
  Program g = program(Collective::kAllGather,
                      {{copy(in(0), out(0)), recvReduce(1, in(0), out(1))}, {copy(in(0), out(1)), send(0, in(0))}});
  expectRejected(g, {"rank 0 step 1 (recv_reduce from rank 1, channel 0): reduces data, but allgather is not a "
                     "reducing collective"});
  Program o = program(Collective::kAllGather, {{copy(in(0), out(0)), copy(out(0, 2), out(1, 2))}, {}});
  o.ranks[1].steps.clear();
  o.ranks.resize(4);
  o.nranks = 4;
  expectRejected(o, {"rank 0 step 1 (copy): src output chunks [0,2) and dst output chunks [1,3) overlap partially"});
  Program w = goodAllreduce();
  w.ranks.pop_back();
  expectRejected(w, {"has programs for 1 ranks, expected 2"});
  Program z = goodAllreduce();
  z.chunksPerBlock = 0;
  expectRejected(z, {"chunksPerBlock must be >= 1"});
  Program rt = program(Collective::kReduce, {{}, {}}, 1, 0, false, 1, 2);
  expectRejected(rt, {"root 2 out of range"});
}

TEST(Verifier, ErrorsNameTheProgram) {
  Program p = goodAllreduce();
  p.name = "ring(channels=2)";
  p.ranks[1].steps[1] = recv(0, out(0));
  Status st = verifyProgram(p);
  EXPECT_EQ(st.message().rfind("schedule ring(channels=2) allreduce nranks=2: ", 0), 0u) << st.message();
}

TEST(Verifier, CheckResultOffSkipsOnlyTheFinalCheck) {
  Program p = program(Collective::kAllGather, {{copy(in(0), out(0))}, {copy(in(0), out(1))}});
  EXPECT_TRUE(verifyProgram(p, VerifyOptions{false}).isOk());
  p.ranks[0].steps.push_back(send(1, in(0)));
  EXPECT_FALSE(verifyProgram(p, VerifyOptions{false}).isOk());
}

// Random single mutations of built-in programs. Whatever the verifier accepts
// must run to completion with the right numbers in the reference interpreter
// (so the verifier's acceptance is sound); most mutations must be rejected.
void mutate(Program* p, std::mt19937* rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>((*rng)() % n); };
  int r = static_cast<int>(pick(p->ranks.size()));
  std::vector<Step>& steps = p->ranks[r].steps;
  if (steps.empty()) return;
  size_t k = pick(steps.size());
  Step& s = steps[k];
  switch (pick(9)) {
    case 0: s.src.first = static_cast<uint32_t>(pick(p->chunksIn(s.src.buf) + 1)); break;
    case 1: s.dst.first = static_cast<uint32_t>(pick(p->chunksIn(s.dst.buf) + 1)); break;
    case 2: if (s.sendPeer >= 0) s.sendPeer = static_cast<int>(pick(p->nranks)); break;
    case 3: if (s.recvPeer >= 0) s.recvPeer = static_cast<int>(pick(p->nranks)); break;
    case 4: steps.erase(steps.begin() + static_cast<long>(k)); break;
    case 5: if (k + 1 < steps.size()) std::swap(steps[k], steps[k + 1]); break;
    case 6: s.src.buf = s.src.buf == Buf::kInput ? Buf::kOutput : Buf::kInput; break;
    case 7: s.dst.buf = s.dst.buf == Buf::kOutput ? Buf::kScratch : Buf::kOutput; break;
    case 8: s.op = static_cast<Op>(pick(8)); break;
  }
}

TEST(Verifier, AcceptedMutantsComputeTheRightResult) {
  std::mt19937 rng(12345);
  int accepted = 0, rejected = 0;
  struct Case {
    const char* name;
    Collective c;
    int n;
    bool inPlace;
  };
  const Case cases[] = {{"ring", Collective::kAllReduce, 4, false},     {"ring", Collective::kAllGather, 3, true},
                        {"tree", Collective::kAllReduce, 5, false},     {"halving_doubling", Collective::kReduceScatter, 5, false},
                        {"recursive_doubling", Collective::kAllReduce, 3, true}, {"direct", Collective::kAlltoAll, 3, true},
                        {"double_binary_tree", Collective::kReduce, 6, false},   {"ring", Collective::kBroadcast, 4, true}};
  for (const Case& c : cases) {
    GenerateRequest req{c.c, c.n, isRooted(c.c) ? 1 : 0, c.inPlace, {}, {}};
    Program base = generateBuiltin(c.name, req).take();
    for (int i = 0; i < 150; ++i) {
      Program p = base;
      mutate(&p, &rng);
      if (!verifyProgram(p).isOk()) {
        ++rejected;
        continue;
      }
      ++accepted;
      std::string bad = runAndCheck(p, 5, static_cast<unsigned>(i));
      ASSERT_EQ(bad, "") << c.name << " mutant " << i << " was accepted but computes wrongly";
    }
  }
  printf("mutants: %d rejected, %d accepted (and computed correctly)\n", rejected, accepted);
  EXPECT_GT(rejected, accepted);
}

}  // namespace
}  // namespace theseus::schedule
