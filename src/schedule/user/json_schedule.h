// JSON schedules, format version 1 (docs/schedule-format.md, schema in
// docs/schemas/schedule.schema.json).
//
// A file holds one schedule: its name, collective and one program per rank
// count (and root / layout), each an ordered list of steps per rank. Parsing
// is strict: unknown fields, wrong JSON types, unknown ops or buffers, peers
// or chunks out of range and forward deps are rejected with the file name,
// the JSON pointer of the offending value (RFC 6901, e.g.
// "/programs/0/ranks/2/steps/5/src") and the problem. Programs that parse are
// then verified (fixed_schedule.h) and verifier errors name the rank and step
// and their JSON pointer.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "schedule/user/fixed_schedule.h"

namespace theseus::schedule::user {

constexpr int kJsonFormatVersion = 1;

// Limits of the loader (documented in docs/schedule-format.md).
constexpr int kMaxJsonRanks = 1 << 16;
constexpr uint32_t kMaxChunksPerBlock = 1 << 16;
constexpr uint32_t kMaxScratchBlocks = 1 << 16;
constexpr uint32_t kMaxUserChannels = 32;
constexpr uint32_t kMaxStepsPerRank = 1 << 20;
constexpr uint32_t kMaxDepsPerStep = 1024;
constexpr size_t kMaxScheduleFileBytes = size_t{1} << 30;
// Chunk slots of a program: nranks x the chunks of a rank's input, output and scratch buffers. The
// verifier keeps state for every slot (about 100 bytes each), so a file's few bytes must not claim
// more (an alltoall of 3,000 ranks with empty programs, 9 KB of JSON, took 4 GB and 9 s). 2^22
// covers an alltoall of 1,448 ranks at one chunk per block.
constexpr uint64_t kMaxChunkSlots = uint64_t{1} << 22;
uint64_t chunkSlots(Collective c, int nranks, uint64_t chunksPerBlock, uint64_t scratchBlocks);

// Parses and verifies a document; `path` names it in messages.
Result<std::shared_ptr<FixedSchedule>> parseJsonSchedule(const std::string& text, const std::string& path);
Result<std::shared_ptr<FixedSchedule>> loadJsonSchedule(const std::string& path);

// Reads a whole file (at most kMaxScheduleFileBytes) with a clear error.
Result<std::string> readScheduleFile(const std::string& path);

// Writes `programs` (same name and collective) as one version-1 document
// that parseJsonSchedule reads back to the same programs. Ranges use the
// compact form ("input[3]", "output[0:4]").
std::string programsToJson(const std::string& name, Collective collective, const std::string& description,
                           const std::vector<FixedProgram>& programs);

}  // namespace theseus::schedule::user
