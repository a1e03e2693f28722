// Piece-level work of one step (used by the progress engine): moves one piece
// if the connections allow it right now, never waiting. Shared by every
// executor; memory is touched only through its Primitives.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "exec/plan.h"
#include "exec/primitives.h"
#include "transport/transport.h"

namespace theseus::exec {

enum class PieceResult : uint8_t {
  kBlocked,    // nothing moved (no message yet, no free slot)
  kReceived,   // fused two-phase ops: the receive half moved (dst written, message released)
  kDone,       // the whole piece moved
};

struct PieceIo {
  transport::SendConnection* out = nullptr;  // set when the step may send now (its turn)
  transport::RecvConnection* in = nullptr;   // set when the step may receive now (its turn)
  bool received = false;                     // the receive half of this piece already happened
  // Filled by sends: the ticket of a direct message (0 if the piece went inline).
  uint64_t directTicket = 0;
};

// Moves piece `p` of `step` with the executor's primitives. Errors: a message
// with the wrong tag or size.
Status movePiece(const Primitives& prims, const Plan& plan, const PlanStep& step, const Piece& p, PieceIo& io,
                 PieceResult* result);

}  // namespace theseus::exec
