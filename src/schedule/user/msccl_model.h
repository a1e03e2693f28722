// Internal to the MSCCL import: the XML document as read (msccl_import.cc),
// before it is lowered to the IR (msccl_lower.cc). Every element keeps its
// line number for error messages.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/ir.h"
#include "schedule/user/fixed_schedule.h"

namespace theseus::schedule::user::msccl {

enum class StepType { kSend, kRecv, kRecvCopySend, kRecvReduceSend, kRecvReduce, kRecvReduceCopySend, kCopy,
                      kReduce, kNop };

struct XStep {
  StepType type = StepType::kNop;
  std::string typeText;
  int s = 0;
  Buf srcBuf = Buf::kInput, dstBuf = Buf::kInput;
  int64_t srcOff = -1, dstOff = -1, count = 0;
  int depTb = -1, depStep = -1;
  int line = 0;
};

struct XThreadBlock {
  int id = 0;
  int send = -1, recv = -1, channel = 0;
  std::vector<XStep> steps;
  int line = 0;
};

struct XGpu {
  int id = 0;
  int64_t inputChunks = 0, outputChunks = 0, scratchChunks = 0;
  std::vector<XThreadBlock> tbs;
  int line = 0;
};

struct XAlgo {
  std::string name;          // as written
  Collective collective = Collective::kAllReduce;
  int ngpus = 0;
  int nchannels = 1;
  int64_t nchunksPerLoop = 0;
  Layout layout = Layout::kOutOfPlace;
  int root = 0;
  uint64_t minBytes = 0, maxBytes = UINT64_MAX;
  std::string proto;
  std::vector<XGpu> gpus;    // indexed by gpu id
  int line = 0;
};

// What a step type reads, writes, sends and receives.
bool stepSends(StepType t);
bool stepReceives(StepType t);
bool stepReadsSrc(StepType t);
bool stepWritesDst(StepType t);
Op irOp(StepType t);  // not for kNop

// Re-lays out every rank's scratch so data keeps its position within a block
// (msccl_geometry.cc). `locate` names a step in errors.
Status alignScratch(Program& p, const std::function<std::string(int, uint32_t)>& locate, const std::string& path);

// Lowers a checked document to one FixedProgram (origin and locate filled).
// `path` names the file in messages.
Result<FixedProgram> lower(const XAlgo& algo, const std::string& path);

}  // namespace theseus::schedule::user::msccl
