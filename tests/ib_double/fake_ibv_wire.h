// The wire of the libibverbs test double: how QPs find each other (unix sockets
// under THESEUS_FAKE_IBV_DIR) and the process's wire thread. See fake_ibv_wire.cc.
#pragma once

#include "fake_ibv_internal.h"

namespace theseus::fakeibv {

// Allocates qp's number by binding its listening socket exclusively; 0 or an errno value.
int listenQp(State& s, FakeQp* qp);
// Closes the listening socket and the accepted connections of qp, removes its files.
void unlistenQp(State& s, FakeQp* qp);
// The LID-named alias of qp's socket, made when its port is known (INIT); 0 or an errno value.
int setAlias(State& s, FakeQp* qp);
void removeAlias(FakeQp* qp);
// The peer's socket path from qp's address vector and destination QP number (RTR).
void setPeer(State& s, FakeQp* qp);
// Completes the head of qp's send queue (success: pops it, completion when signaled).
void completeSendHead(State& s, FakeQp* qp, ibv_wc_status status);

}  // namespace theseus::fakeibv
