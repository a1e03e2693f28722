# Test helpers.
#   theseus_unit_test(name SOURCES ... [LABELS ...] [TIMEOUT s])
#       links the static core library (internals) and GoogleTest's main.
#   theseus_api_test(name SOURCES ... [LABELS ...] [TIMEOUT s])
#       links libnccl.so.2 and the multi-process test harness (tests/common);
#       ranks are real processes spawned from the test binary.
find_package(GTest REQUIRED)

function(theseus_unit_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE theseus_core GTest::gtest GTest::gtest_main theseus_warnings ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "unit;${T_LABELS}")
endfunction()

function(theseus_api_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE nccl theseus_test_harness GTest::gtest theseus_warnings ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "api;${T_LABELS}"
    ENVIRONMENT "THESEUS_BOOTSTRAP_TIMEOUT_MS=60000")
endfunction()
