# tessera_test(NAME name SOURCES ... LIBS ... [LABELS ...] [WHOLE]): one GoogleTest binary,
# registered with ctest through gtest_discover_tests (leveldb's leveldb_test() idea). WHOLE
# registers the binary as one ctest test instead, for suites that share an expensive fixture
# (the e2e control plane starts once per process).
#
# tessera_fuzz_test(NAME name SOURCE file.cc LIBS ... CORPUS dir): the same fuzz target built
# twice (fluent-bit): with TESSERA_FUZZ as a libFuzzer binary, and always as an ordinary program
# that replays every file of the seed corpus, registered as a ctest with label fuzz-regression.
include_guard(GLOBAL)
if(TESSERA_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

function(tessera_test)
  cmake_parse_arguments(T "WHOLE" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} tessera_testutil GTest::gmock GTest::gtest_main
                                          tessera_warnings)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(T_WHOLE)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  else()
    gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

function(tessera_fuzz_test)
  cmake_parse_arguments(F "" "NAME;SOURCE;CORPUS" "LIBS" ${ARGN})
  add_executable(${F_NAME}_replay ${F_SOURCE} ${PROJECT_SOURCE_DIR}/test/fuzz/replay_main.cc)
  target_link_libraries(${F_NAME}_replay PRIVATE ${F_LIBS} tessera_warnings)
  add_test(NAME ${F_NAME}_corpus COMMAND ${F_NAME}_replay ${F_CORPUS})
  set_tests_properties(${F_NAME}_corpus PROPERTIES LABELS fuzz-regression)
  if(TESSERA_FUZZ)
    add_executable(${F_NAME} ${F_SOURCE})
    target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${F_NAME} PRIVATE ${F_LIBS} tessera_warnings)
  endif()
endfunction()
