# Build options. Every option is listed in docs/building.md.
option(THESEUS_BUILD_TESTS "Build the GoogleTest suite" ON)
set(THESEUS_CUDA "AUTO" CACHE STRING "Build the CUDA parts: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE THESEUS_CUDA PROPERTY STRINGS AUTO ON OFF)
set(THESEUS_SANITIZE "" CACHE STRING "Sanitizer build: '', address, thread")
option(THESEUS_FUZZ "libFuzzer targets fuzz_<target> (tests/fuzz/), whole build with ASan+UBSan; needs clang" OFF)

# Warnings for our own code only (targets opt in through theseus_warnings).
add_library(theseus_warnings INTERFACE)
target_compile_options(theseus_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)

# Sanitizers instrument the host compiler's objects (C and C++: the CUDA executor's host code and kernel lane loop
# as the CUDA test double runs them included); nvcc's objects, only used on a real GPU, stay uninstrumented.
if(THESEUS_SANITIZE STREQUAL "address")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>")
  add_link_options(-fsanitize=address,undefined)
elseif(THESEUS_SANITIZE STREQUAL "thread")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=thread;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=thread)
elseif(NOT THESEUS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "THESEUS_SANITIZE must be '', address or thread (got '${THESEUS_SANITIZE}')")
endif()

# Fuzzing (make fuzz, scripts/fuzz.sh): every object gets libFuzzer's coverage instrumentation and ASan+UBSan
# (UBSan reports abort, so the fuzzer sees them as crashes); only the fuzz_<target> binaries link libFuzzer
# itself (tests/fuzz/CMakeLists.txt).
if(THESEUS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "THESEUS_FUZZ=ON needs clang (libFuzzer): configure with CC=clang CXX=clang++ "
                        "(got ${CMAKE_C_COMPILER_ID} / ${CMAKE_CXX_COMPILER_ID}); make fuzz does this")
  endif()
  if(NOT THESEUS_SANITIZE STREQUAL "")
    message(FATAL_ERROR "THESEUS_FUZZ=ON brings its own sanitizers (ASan+UBSan); leave THESEUS_SANITIZE empty")
  endif()
  # The parsers are host code; nvcc would not take these flags.
  if(THESEUS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "THESEUS_FUZZ=ON builds without CUDA: use -DTHESEUS_CUDA=OFF")
  endif()
  set(THESEUS_CUDA OFF)
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
