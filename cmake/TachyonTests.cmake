# tachyon_discover_tests(target group [ENVIRONMENT env...]): gtest_discover_tests for an
# executable that holds the tests of many files. Each gtest case becomes the ctest test
# <group>.<short>.<Suite>.<Case>, where <short> comes from the file that defines the case
# (tests/<group>/test_<short>.cpp), so the names stay those of one executable per file.
# gtest itself says which file defines each case (--gtest_list_tests with JSON output);
# cmake/TachyonListTests.cmake turns that list into the ctest file after every link.
set(TACHYON_LIST_TESTS_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/TachyonListTests.cmake)

function(tachyon_discover_tests target group)
  cmake_parse_arguments(arg "" "" "ENVIRONMENT" ${ARGN})
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS ${ctest_file}
    COMMAND ${CMAKE_COMMAND}
      -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
      -D "TEST_GROUP=${group}"
      -D "TEST_ENVIRONMENT=${arg_ENVIRONMENT}"
      -D "TEST_WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}"
      -D "CTEST_FILE=${ctest_file}"
      -P ${TACHYON_LIST_TESTS_SCRIPT}
    VERBATIM)
  # Until the executable is built, ctest shows one failing placeholder (as gtest_discover_tests does).
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  file(WRITE ${include_file}
    "if(EXISTS \"${ctest_file}\")\n"
    "  include(\"${ctest_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
