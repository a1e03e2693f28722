// RankTemplate: one rank's program prepared once for repeated execution — the
// steps in executor form, their predecessors (from the schedule analysis),
// the connections the rank uses with each step's position in their message
// order, and per step whether its source is still this rank's raw input (so a
// pre-multiplying reduction scales it exactly once). Lowering a template for a
// call only fills in addresses.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "exec/plan.h"
#include "schedule/analysis.h"
#include "schedule/ir.h"

namespace theseus::exec {

struct TemplateStep {
  schedule::Op op = schedule::Op::kSend;
  uint8_t channel = 0;
  int32_t recvPeer = -1, sendPeer = -1;
  schedule::ChunkRange src, dst;
  bool srcIsRawInput = false;
  bool dstIsRawInput = false;  // kReduce whose accumulator is still raw input (in place)
  int32_t inConn = -1, outConn = -1;
  uint32_t inPos = 0, outPos = 0;
  uint32_t predBegin = 0, predEnd = 0;
};

struct RankTemplate {
  const schedule::Program* program = nullptr;  // owned by the program cache; outlives the template
  int rank = 0;
  std::vector<TemplateStep> steps;
  std::vector<uint32_t> preds;
  std::vector<PlanConn> conns;  // unresolved (no connection pointers)
  bool usesInput = false, usesOutput = false, usesScratch = false;
  uint64_t id = 0;  // unique in the process, never reused: the shapeId of the plans lowered from it
};

Result<std::unique_ptr<RankTemplate>> buildRankTemplate(const schedule::Program& program, int rank,
                                                        const schedule::RankPlan& analysis);

// The buffers of one call.
struct CallBuffers {
  const char* input = nullptr;
  char* output = nullptr;
  char* scratch = nullptr;
  size_t unitElems = 0;   // U: elements per block
  size_t elemBytes = 1;
};

// Fills the plan's steps, preds, conns and geometry from the template for one call
// (the caller sets reduction, tag, slice size and the descriptive fields first:
// `plan.sliceBytes` must be set before this call).
void lowerTemplate(const RankTemplate& t, const CallBuffers& b, const Reduction& red, Plan& plan);

}  // namespace theseus::exec
