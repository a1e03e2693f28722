// Thread-locals on hot paths. In a shared library a thread-local's address is
// a __tls_get_addr call (the global-dynamic model: initial-exec would take
// static TLS, which a dlopen'd libnccl cannot count on), and GCC treats that
// address as cheap to recompute: after each call it asks __tls_get_addr again
// at the next use instead of keeping the pointer (callgrind: five look-ups
// per executeOps for one thread-local). keptAddress() hides where the pointer
// came from, so the compiler keeps it: one look-up per function.
#pragma once

namespace theseus {

template <class T>
inline T& keptAddress(T& threadLocal) {
  T* p = &threadLocal;
  asm("" : "+r"(p));
  return *p;
}

}  // namespace theseus
