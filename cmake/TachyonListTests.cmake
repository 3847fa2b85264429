# Run after each link of a test executable (see TachyonTests.cmake): lists its gtest cases with
# the file of each, and writes CTEST_FILE with one ctest test per case, named
# <TEST_GROUP>.<short>.<Suite>.<Case> from tests/<group>/test_<short>.cpp. Parameterized and
# typed cases get the names gtest_discover_tests gives them (Case/<value>, Suite.Case<Type>).
# In: TEST_EXECUTABLE, TEST_GROUP, TEST_ENVIRONMENT, TEST_WORKING_DIR, CTEST_FILE.
set(json_file "${CTEST_FILE}.json")
file(REMOVE "${json_file}")
execute_process(
  COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests "--gtest_output=json:${json_file}"
  WORKING_DIRECTORY "${TEST_WORKING_DIR}"
  TIMEOUT 60
  OUTPUT_VARIABLE output ERROR_VARIABLE output
  RESULT_VARIABLE result)
if(NOT result EQUAL 0 OR NOT EXISTS "${json_file}")
  message(FATAL_ERROR "Listing the tests of ${TEST_EXECUTABLE} failed (${result}):\n${output}")
endif()
file(READ "${json_file}" listing)

# A name goes into the script between brackets that it does not contain itself.
function(bracket value out)
  set(equals "=")
  while(value MATCHES "]${equals}]")
    string(APPEND equals "=")
  endwhile()
  set(${out} "[${equals}[${value}]${equals}]" PARENT_SCOPE)
endfunction()

set(script "")
string(JSON suite_count LENGTH "${listing}" testsuites)
math(EXPR last_suite "${suite_count} - 1")
foreach(i RANGE ${last_suite})
  # Each suite is parsed on its own: string(JSON) reparses its whole input on every call.
  string(JSON suite_json GET "${listing}" testsuites ${i})
  string(JSON suite GET "${suite_json}" name)
  string(JSON case_count LENGTH "${suite_json}" testsuite)
  math(EXPR last_case "${case_count} - 1")
  foreach(j RANGE ${last_case})
    string(JSON case_json GET "${suite_json}" testsuite ${j})
    string(JSON case GET "${case_json}" name)
    string(JSON file GET "${case_json}" file)
    string(JSON type_param ERROR_VARIABLE no_type GET "${case_json}" type_param)
    string(JSON value_param ERROR_VARIABLE no_value GET "${case_json}" value_param)
    get_filename_component(file_name "${file}" NAME)
    if(NOT file_name MATCHES "^test_(.+)\\.cpp$")
      message(FATAL_ERROR "${suite}.${case} is defined in ${file}, not in a tests/${TEST_GROUP}/test_<name>.cpp")
    endif()
    set(short "${CMAKE_MATCH_1}")
    # The names gtest_discover_tests makes from the text listing ("Case/0  # GetParam() = 1",
    # "Suite/0.  # TypeParam = int"), made from the same text.
    set(pretty_suite "${suite}")
    set(pretty_case "${case}")
    set(type_suffix "")
    if(no_type STREQUAL "NOTFOUND")
      string(REGEX REPLACE "/.*" "" pretty_suite "${suite}")
      set(type_suffix "<${type_param}>")
    endif()
    if(no_value STREQUAL "NOTFOUND")
      string(REGEX REPLACE "/[0-9]+[ #]+GetParam\\(\\) = " "/" pretty_case "${case}  # GetParam() = ${value_param}")
    endif()
    string(REGEX REPLACE "^DISABLED_" "" pretty_suite "${pretty_suite}")
    string(REGEX REPLACE "^DISABLED_" "" pretty_case "${pretty_case}")
    bracket("${TEST_GROUP}.${short}.${pretty_suite}.${pretty_case}${type_suffix}" name)
    bracket("--gtest_filter=${suite}.${case}" filter)
    bracket("${TEST_EXECUTABLE}" executable)
    bracket("${TEST_WORKING_DIR}" working_dir)
    bracket("${TEST_ENVIRONMENT}" environment)
    string(APPEND script "add_test(${name} ${executable} ${filter} --gtest_also_run_disabled_tests)\n")
    string(APPEND script "set_tests_properties(${name} PROPERTIES WORKING_DIRECTORY ${working_dir}"
                         " SKIP_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==] ENVIRONMENT ${environment})\n")
    if(suite MATCHES "^DISABLED_" OR case MATCHES "^DISABLED_")
      string(APPEND script "set_tests_properties(${name} PROPERTIES DISABLED TRUE)\n")
    endif()
  endforeach()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
