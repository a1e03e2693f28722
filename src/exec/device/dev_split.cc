#include "exec/device/dev_split.h"

#include <algorithm>

#include "common/knobs.h"

namespace theseus::exec::dev {
namespace {

const IntKnob kDeviceBlocks("THESEUS_DEVICE_BLOCKS", 16,
                            "The most thread blocks the device executor runs one communicator's operation on: "
                            "independent parts of its schedule (its channels) run side by side, one block each "
                            "(1: one block per communicator and group); capped where the GPU cannot hold that many for every "
                            "operation and rank that runs on it at once");

constexpr uint32_t kNone = ~0u;

// A local step is cut into copies of at least this many bytes each (below that a block's start costs more).
constexpr uint64_t kMinSharedStepBytes = 1 << 20;

uint32_t findRoot(std::vector<uint32_t>& root, uint32_t x) {
  while (root[x] != x) {
    root[x] = root[root[x]];
    x = root[x];
  }
  return x;
}

void unite(std::vector<uint32_t>& root, uint32_t a, uint32_t b) {
  a = findRoot(root, a);
  b = findRoot(root, b);
  if (a != b) root[std::max(a, b)] = std::min(a, b);
}

// What a step moves, for balancing: chunks of a chunked plan (chunks of one
// plan are of one size, to within an element), bytes of a flat one; a step
// that moves nothing still takes its turns.
uint64_t stepWeight(const Plan& p, const Step& s) { return 1 + (p.chunked ? uint64_t(s.nchunks) : s.bytes); }

// Copies the steps of part `b` (and their predecessor lists and connections, renumbered) into `out`.
void buildPart(SplitPlan& sp, uint32_t b, LoweredPlan& out) {
  const LoweredPlan& w = sp.whole;
  const uint32_t nsteps = static_cast<uint32_t>(w.steps.size());
  out.steps.clear();
  out.preds.clear();
  out.conns.clear();
  // sp.index: a step's (or connection's, offset by nsteps) index in its part.
  for (uint32_t s = 0; s < nsteps; ++s) {
    const uint32_t first = sp.firstUnit[findRoot(sp.root, s)];
    for (uint32_t u = first; u < first + sp.units[first].copies; ++u) {
      if (sp.units[u].part != b) continue;
      sp.index[s] = static_cast<uint32_t>(out.steps.size());
      out.steps.push_back(w.steps[s]);
      out.steps.back().part = static_cast<uint8_t>(sp.units[u].copy);
      out.steps.back().parts = static_cast<uint8_t>(sp.units[u].copies);
    }
  }
  for (uint32_t c = 0; c < w.conns.size(); ++c) sp.index[nsteps + c] = kNone;
  for (Step& st : out.steps) {
    for (int32_t* conn : {&st.inConn, &st.outConn}) {
      if (*conn < 0) continue;
      uint32_t& at = sp.index[nsteps + static_cast<uint32_t>(*conn)];
      if (at == kNone) {
        at = static_cast<uint32_t>(out.conns.size());
        out.conns.push_back(w.conns[static_cast<size_t>(*conn)]);
      }
      *conn = static_cast<int32_t>(at);
    }
    const uint32_t begin = static_cast<uint32_t>(out.preds.size());
    for (uint32_t i = st.predBegin; i < st.predEnd; ++i) out.preds.push_back(sp.index[w.preds[i]]);
    st.predBegin = begin;
    st.predEnd = static_cast<uint32_t>(out.preds.size());
  }
  out.state.assign(out.steps.size(), StepState{});
  out.cursors.assign(out.conns.size(), Cursor{});
  Plan& p = out.plan;
  p = w.plan;
  p.steps = out.steps.data();
  p.preds = out.preds.empty() ? nullptr : out.preds.data();
  p.conns = out.conns.empty() ? nullptr : out.conns.data();
  p.state = out.state.data();
  p.cursors = out.cursors.empty() ? nullptr : out.cursors.data();
  p.nsteps = static_cast<uint32_t>(out.steps.size());
  p.nconns = static_cast<uint32_t>(out.conns.size());
  p.npreds = static_cast<uint32_t>(out.preds.size());
  p.remaining = p.nsteps;
  p.directSent = 0;
  p.failure = Failure{};
  p.divideDst = nullptr;  // the lane divides once every part finished
  p.divideElems = 0;
}

}  // namespace

namespace {

// The analysis: components, units and their parts (sets sp.count), then the parts.
void analyse(SplitPlan& sp, uint32_t maxParts) {
  sp.count = 1;
  const LoweredPlan& w = sp.whole;
  const uint32_t nsteps = static_cast<uint32_t>(w.steps.size());
  if (maxParts < 2 || nsteps == 0) return;

  // Components of "is a predecessor of" and "uses the same connection".
  sp.root.resize(nsteps);
  for (uint32_t s = 0; s < nsteps; ++s) sp.root[s] = s;
  sp.index.assign(nsteps + w.conns.size(), kNone);
  for (uint32_t s = 0; s < nsteps; ++s) {
    const Step& st = w.steps[s];
    for (uint32_t i = st.predBegin; i < st.predEnd; ++i) unite(sp.root, s, w.preds[i]);
    for (int32_t conn : {st.inConn, st.outConn}) {
      if (conn < 0) continue;
      uint32_t& owner = sp.index[nsteps + static_cast<uint32_t>(conn)];
      if (owner == kNone) owner = s;
      else unite(sp.root, s, owner);
    }
  }
  // Weight and size per component (at its root).
  sp.weight.assign(nsteps, 0);
  sp.size.assign(nsteps, 0);
  uint32_t ncomponents = 0;
  for (uint32_t s = 0; s < nsteps; ++s) {
    const uint32_t r = findRoot(sp.root, s);
    if (sp.size[r]++ == 0) ++ncomponents;
    sp.weight[r] += stepWeight(w.plan, w.steps[s]);
  }
  // Units of work: a component each, except that a component of one large local step (a copy or a reduction
  // that nothing waits on and that waits on nothing, such as one rank's whole program) is cut into copies that
  // move a share of each of its pieces, while blocks are left over.
  uint32_t spare = maxParts > ncomponents ? maxParts - ncomponents : 0;
  sp.units.clear();
  sp.firstUnit.assign(nsteps, kNone);
  for (uint32_t r = 0; r < nsteps; ++r) {
    if (sp.size[r] == 0) continue;
    uint32_t copies = 1;
    const Step& st = w.steps[r];
    if (sp.size[r] == 1 && spare > 0 && w.plan.chunked && (st.op == kOpCopy || st.op == kOpReduce)) {
      const uint64_t chunkBytes = w.plan.unitElems / std::max<uint64_t>(w.plan.chunksPerBlock, 1) * w.plan.elemBytes;
      const uint64_t most = uint64_t(st.nchunks) * chunkBytes / kMinSharedStepBytes;
      copies = static_cast<uint32_t>(std::min<uint64_t>({most, uint64_t(spare) + 1, 255}));
      copies = std::max(copies, 1u);
      spare -= copies - 1;
    }
    sp.firstUnit[r] = static_cast<uint32_t>(sp.units.size());
    for (uint32_t k = 0; k < copies; ++k) sp.units.push_back(SplitUnit{k, copies, kNone, (sp.weight[r] + copies - 1) / copies});
  }
  const uint32_t nunits = static_cast<uint32_t>(sp.units.size());
  if (nunits < 2) return;
  const uint32_t nparts = std::min(nunits, maxParts);
  // Heaviest first onto the lightest part (std::sort: stable_sort may allocate, and a warm enqueue allocates nothing).
  sp.index.resize(nunits);
  for (uint32_t u = 0; u < nunits; ++u) sp.index[u] = u;
  std::sort(sp.index.begin(), sp.index.end(), [&](uint32_t a, uint32_t b) {
    return sp.units[a].weight != sp.units[b].weight ? sp.units[a].weight > sp.units[b].weight : a < b;
  });
  sp.load.assign(nparts, 0);
  for (uint32_t u : sp.index) {
    const uint32_t b = static_cast<uint32_t>(std::min_element(sp.load.begin(), sp.load.end()) - sp.load.begin());
    sp.units[u].part = b;
    sp.load[b] += sp.units[u].weight;
  }

  if (sp.parts.size() < nparts) sp.parts.resize(nparts);
  sp.index.assign(nsteps + w.conns.size(), kNone);
  for (uint32_t b = 0; b < nparts; ++b) buildPart(sp, b, sp.parts[b]);
  sp.count = nparts;
}

}  // namespace

void splitPlan(SplitPlan& sp, uint32_t maxParts, uint64_t shape, uint64_t bytes) {
  if (shape != 0 && sp.shape == shape && sp.shapeBytes == bytes && sp.shapeMaxParts == maxParts) {
    // The same shape as last time: components, units and parts are those; only the steps' addresses
    // (and run state) are new.
    sp.count = sp.shapeCount;
    if (sp.count > 1) {
      sp.index.assign(sp.whole.steps.size() + sp.whole.conns.size(), kNone);
      for (uint32_t b = 0; b < sp.count; ++b) buildPart(sp, b, sp.parts[b]);
    }
    return;
  }
  analyse(sp, maxParts);
  sp.shape = shape;
  sp.shapeBytes = bytes;
  sp.shapeMaxParts = maxParts;
  sp.shapeCount = sp.count;
}

Plan emptyPart(const Plan& whole) {
  Plan p = whole;
  p.steps = nullptr;
  p.preds = nullptr;
  p.conns = nullptr;
  p.state = nullptr;
  p.cursors = nullptr;
  p.nsteps = p.nconns = p.npreds = p.remaining = p.directSent = 0;
  p.red.scalarSource = nullptr;  // nothing to scale
  p.divideDst = nullptr;
  p.divideElems = 0;
  p.failure = Failure{};
  return p;
}

uint32_t maxBlocksPerLane() {
  static const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(kDeviceBlocks.get(), 1, 64));
  return blocks;
}

}  // namespace theseus::exec::dev
