// Fuzz target: the bootstrap's wire format (bootstrap/wire.h), what arrives on
// a rendezvous connection or a control link from another process - or from
// anything else that connects to the port.
//
// The bytes are a stream as read from a socket. FrameParser, the control
// thread's incremental parser, cuts it into frames ({marker, type, length} +
// payload, the length bounded before anything is allocated); it must find the
// same frames, and the same error, whether the bytes arrive at once or in
// pieces of 1..7 bytes. Every payload then goes through every codec a frame
// can meet: the rank's join at the root (decodeRootJoin), the peer table the
// root sends back (decodeTable, for the rank count the payload claims, capped
// at 4096, and for 4 ranks), a member's join on a control link
// (decodeLinkJoin), an error or timeout frame's text (failureOf), and the
// first 128 bytes as a unique id (decodeRootId). A payload that decodes must
// encode back to the same bytes: the codecs are canonical.
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "fuzz_util.h"

namespace {

using namespace theseus;
using namespace theseus::bootstrap;

constexpr size_t kMaxPayload = 1 << 16;

// Frames of `bytes` fed in pieces of `piece(i)` bytes; the last result of next() in *last.
template <typename Piece>
std::vector<wire::Frame> frames(const std::string& bytes, Piece piece, int* last, std::string* error) {
  wire::FrameParser parser(kMaxPayload);
  std::vector<wire::Frame> out;
  size_t pos = 0;
  *last = 0;
  for (size_t i = 0; pos < bytes.size() && *last >= 0; ++i) {
    const size_t n = std::min(piece(i), bytes.size() - pos);
    parser.append(bytes.data() + pos, n);
    pos += n;
    wire::Frame f;
    while ((*last = parser.next(&f)) == 1) out.push_back(f);
  }
  *error = parser.error();
  return out;
}

void decodeAll(const std::string& payload) {
  wire::RootJoin join;
  if (wire::decodeRootJoin(payload, &join).isOk())
    FUZZ_CHECK(wire::encodeRootJoin(join) == payload, "a root join does not re-encode to its bytes");
  wire::LinkJoin link;
  if (wire::decodeLinkJoin(payload, &link).isOk())
    FUZZ_CHECK(wire::encodeLinkJoin(link) == payload, "a link join does not re-encode to its bytes");
  uint32_t claimed = 0;
  if (payload.size() >= 12) memcpy(&claimed, payload.data() + 8, sizeof(claimed));
  for (int expect : {static_cast<int>(std::min<uint32_t>(claimed, 4096)), 4}) {
    wire::Table table;
    if (wire::decodeTable(payload, expect, &table).isOk())
      FUZZ_CHECK(wire::encodeTable(table) == payload, "a peer table does not re-encode to its bytes");
  }
  if (payload.size() >= sizeof(ncclUniqueId)) {
    ncclUniqueId id;
    memcpy(&id, payload.data(), sizeof(id));
    (void)decodeRootId(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (fuzz::tooLong(size, 64 << 10)) return 0;
  const std::string bytes = fuzz::text(data, size);
  int lastWhole = 0, lastPieces = 0;
  std::string errorWhole, errorPieces;
  std::vector<wire::Frame> whole = frames(bytes, [&](size_t) { return bytes.size(); }, &lastWhole, &errorWhole);
  std::vector<wire::Frame> pieces =
      frames(bytes, [&](size_t i) { return 1 + (i * 7 + (i < size ? data[i] : 0)) % 7; }, &lastPieces, &errorPieces);
  FUZZ_CHECK(whole.size() == pieces.size() && lastWhole == lastPieces && errorWhole == errorPieces,
             "the frames depend on how the bytes arrive (%zu frames, result %d vs %zu frames, result %d)",
             whole.size(), lastWhole, pieces.size(), lastPieces);
  for (size_t i = 0; i < whole.size(); ++i) {
    FUZZ_CHECK(whole[i].type == pieces[i].type && whole[i].payload == pieces[i].payload, "frame %zu differs", i);
    FUZZ_CHECK(whole[i].payload.size() <= kMaxPayload, "a frame beyond the limit");
    decodeAll(whole[i].payload);
    Status failure = wire::failureOf(whole[i], "a peer table");
    FUZZ_CHECK(!failure.isOk() && !failure.message().empty(), "an unexpected frame is not a failure");
  }
  // A stream that is not frames at all is still a payload a codec may meet (a frame's body).
  decodeAll(bytes);
  return 0;
}
