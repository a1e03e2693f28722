// What a group's buffers and streams are, checked before anything of the
// group runs (comm/enqueue.cc calls these first): each buffer's memory kind,
// buffers that are no memory at all, buffers and streams of another device
// than their communicator's, device buffers next to pageable memory, and each
// stream's capture into a CUDA graph (read once per stream and group, and
// handed to the executor).
#pragma once

#include <string>
#include <vector>

#include "comm/group.h"
#include "common/status.h"
#include "device/memory_kind.h"
#include "device/stream_capture.h"

namespace theseus::comm {

// Sets every operation's sendMemory/recvMemory, fills `captures` (one entry per stream), `kinds` (the kinds of
// the buffers the ranks use; 0 when none is known) and `captured` (a stream is being captured into a CUDA
// graph); an error for the bad input above, before anything ran.
Status classifyGroup(std::vector<CommOps>& work, std::vector<device::StreamCapture>* captures,
                     device::MemoryKindMask* kinds, bool* captured);

// For an executor that runs a group when called (it cannot be captured): an error when one of the group's
// streams is being captured, from `captures` as classifyGroup read them. `memory`: the group's memory kinds;
// `whyStaged`: why device buffers did not get the CUDA executor (its communicator's reason).
Status refuseCapture(const std::vector<CommOps>& work, const std::vector<device::StreamCapture>& captures,
                     device::MemoryKindMask memory, const std::string& whyStaged);

}  // namespace theseus::comm
