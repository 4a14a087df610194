# Registers the GoogleTest binary with ctest as one test per test suite (not one per test), run at ctest time.
#
# Why: every process of the test binary loads LibTorch before its first test, which on the 2-core CI machine (AMD EPYC,
# Zen 1) costs 0.8 s with Debian 12's LibTorch and 2.3 s under AddressSanitizer (the loader resolves symbols across the
# ~290 libraries it pulls in, then registers every operator). With 264 tests that was about a third of every suite's
# wall time. A suite's tests share one process and run in file order, as `attnmt_tests` alone would run them; suites
# still run side by side and a failure still names its test (GoogleTest's summary, printed by --output-on-failure).
#
# Called by ctest through TEST_INCLUDE_FILES (see CMakeLists.txt) with TEST_EXE, and HEAVY_SUITES: suites known to take
# longest, registered first so that ctest, which has no timings in a fresh build, starts them first and the two lanes
# end together. A stale list only costs scheduling, never a test.
execute_process(COMMAND "${TEST_EXE}" --gtest_list_tests
  OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  add_test(attnmt_tests_NOT_LISTED "${TEST_EXE}" --gtest_list_tests)  # fails again, showing why
  message(WARNING "ctest_suites: ${TEST_EXE} --gtest_list_tests failed (${rc}): ${err}")
  return()
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
foreach(line IN LISTS lines)
  # Suite lines start in column 0 and end with '.'; test lines are indented.
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( .*)?$")
    list(APPEND suites "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(REMOVE_DUPLICATES suites)
set(ordered "")
foreach(s IN LISTS HEAVY_SUITES)
  if(s IN_LIST suites)
    list(APPEND ordered "${s}")
  endif()
endforeach()
foreach(s IN LISTS suites)
  if(NOT s IN_LIST ordered)
    list(APPEND ordered "${s}")
  endif()
endforeach()
list(LENGTH ordered n)
set(i ${n})
foreach(s IN LISTS ordered)
  add_test("${s}" "${TEST_EXE}" "--gtest_filter=${s}.*")
  # COST orders a fresh build's schedule (higher first); ctest replaces it with measured times once it has them.
  set_tests_properties("${s}" PROPERTIES COST ${i})
  math(EXPR i "${i} - 1")
endforeach()
