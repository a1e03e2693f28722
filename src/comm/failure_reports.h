// Telling the other ranks that an operation failed here.
//
// A collective that fails on one rank (a message of another operation, a
// corrupt message, a deferred scalar that cannot be read, a transport error)
// leaves the communicator's sequence broken for everyone, but only the ranks
// that exchange data with this one see it: the others would return success
// for an operation their peer rejected, or wait for data that never comes
// until the stall timeout, and then blame a rank that merely left. So the
// failing rank reports {its rank, the error} to the leader, which relays it to
// every other rank; a rank that hears it fails the communicator at once with
// the reporter's words ("rank 2 reported: ..."): a waiting operation ends, the
// next call fails, and ncclCommGetAsyncError says so while the rank is idle.
// Only the first failure of a rank is reported; failures of an aborted
// communicator (ncclCommAbort here) are not.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "bootstrap/bootstrap.h"
#include "common/status.h"

namespace theseus::comm {

class Communicator;

// The report's payload on the control channel: "<code> <origin rank> <message>".
std::string encodeFailureReport(int rank, const Status& why);
// False (outputs unspecified) unless the payload has that shape with a code
// that is an ncclResult_t failure; the rank is not range-checked here.
bool decodeFailureReport(std::string_view payload, int* code, int* rank, std::string* message);

class FailureReports {
 public:
  explicit FailureReports(Communicator& comm);
  ~FailureReports();  // stop()
  // Installs the handler (every rank, at creation).
  void start();
  // Removes the handler; reports arriving later are dropped.
  void stop();
  // Reports this rank's failure `why` (the first one only).
  void report(const Status& why);

 private:
  struct Shared {
    std::mutex mu;
    Communicator* comm = nullptr;  // null once stopped
  };
  static void apply(Shared& s, int from, const std::string& message, ncclResult_t code);
  Communicator& comm_;
  std::shared_ptr<Shared> shared_;
  std::once_flag reported_;
  bool started_ = false;
};

}  // namespace theseus::comm
