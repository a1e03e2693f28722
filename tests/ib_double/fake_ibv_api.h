// The C ABI edge of the libibverbs test double: the export macro, the guard every
// exported body runs in, and the data-path functions installed in ibv_context::ops.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <new>

#define FAKE_IBV_EXPORT extern "C" __attribute__((visibility("default")))

namespace theseus::fakeibv {

// Runs body; an exception escaping it (allocation failure) becomes onError with errno ENOMEM.
template <class R, class F>
R guard(R onError, F&& body) {
  try {
    return body();
  } catch (...) {
    errno = ENOMEM;
    return onError;
  }
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);

}  // namespace theseus::fakeibv
