// Scalar conversions between float and the narrow floating formats: the
// scalar instantiation of the codecs the vector kernels use (reduce_codec.h
// explains the rounding), so the exported functions and the kernels agree.
#include "exec/reduce.h"
#include "exec/reduce_codec.h"

namespace theseus::exec {

uint16_t floatToHalf(float f) { return static_cast<uint16_t>(codec::Half::encode(f)); }
float halfToFloat(uint16_t h) { return codec::Half::decode(uint32_t{h}); }
uint16_t floatToBf16(float f) { return static_cast<uint16_t>(codec::Bf16::encode(f)); }
float bf16ToFloat(uint16_t b) { return codec::Bf16::decode(uint32_t{b}); }
uint8_t floatToFp8E4M3(float f) { return static_cast<uint8_t>(codec::Fp8E4M3::encode(f)); }
float fp8E4M3ToFloat(uint8_t v) { return codec::Fp8E4M3::decode(uint32_t{v}); }
uint8_t floatToFp8E5M2(float f) { return static_cast<uint8_t>(codec::Fp8E5M2::encode(f)); }
float fp8E5M2ToFloat(uint8_t v) { return codec::Fp8E5M2::decode(uint32_t{v}); }

}  // namespace theseus::exec
