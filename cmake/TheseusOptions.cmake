# Build options. Every option is listed in docs/building.md.
option(THESEUS_BUILD_TESTS "Build the GoogleTest suite" ON)
set(THESEUS_CUDA "AUTO" CACHE STRING "Build the CUDA parts: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE THESEUS_CUDA PROPERTY STRINGS AUTO ON OFF)
set(THESEUS_SANITIZE "" CACHE STRING "Sanitizer build: '', address, thread")

# Warnings for our own code only (targets opt in through theseus_warnings).
add_library(theseus_warnings INTERFACE)
target_compile_options(theseus_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)

if(THESEUS_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(THESEUS_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT THESEUS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "THESEUS_SANITIZE must be '', address or thread (got '${THESEUS_SANITIZE}')")
endif()
