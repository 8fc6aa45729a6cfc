# tutti_discover_tests(target [PROPERTIES name value ...]): each doctest TEST_CASE of `target` becomes
# its own ctest test, labelled by its doctest test suite (unit, multirank, ...), as doctest's own
# doctest_discover_tests(ADD_LABELS 1) does, but from one run of the program after it is linked:
# `--list-test-cases --reporters=xml` gives every case with its suite. doctest's script runs the
# program once more per case to ask its suite; under AddressSanitizer each run of tutti_tests costs
# about 0.45 s, and the 177 of them were 111 s of the ASan build's wall time.
#
# Run as a script (cmake -P) by the POST_BUILD step, with TEST_EXECUTABLE, TEST_WORKING_DIR,
# TEST_PROPERTIES and CTEST_FILE defined.

if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --reporters=xml
                  OUTPUT_VARIABLE output RESULT_VARIABLE result WORKING_DIRECTORY "${TEST_WORKING_DIR}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "listing the test cases of ${TEST_EXECUTABLE} failed (${result}):\n${output}")
  endif()
  # A name in brackets whose level no name can contain: [==[ ... ]==], as doctest's script writes.
  function(bracket out text)
    set(${out} "[==[${text}]==]" PARENT_SCOPE)
  endfunction()
  # The XML's entities end in ';', CMake's list separator: each ';' is read as "<sc>", which an
  # attribute's value cannot hold (its '<' would be written &lt;).
  string(REPLACE ";" "<sc>" output "${output}")
  function(unescape out text)
    string(REPLACE "&lt<sc>" "<" text "${text}")
    string(REPLACE "&gt<sc>" ">" text "${text}")
    string(REPLACE "&quot<sc>" "\"" text "${text}")
    string(REPLACE "&apos<sc>" "'" text "${text}")
    string(REPLACE "&amp<sc>" "&" text "${text}")
    if(text MATCHES "<sc>")
      message(FATAL_ERROR "a test name or suite in ${TEST_EXECUTABLE} holds an unknown XML entity: ${text}")
    endif()
    set(${out} "${text}" PARENT_SCOPE)
  endfunction()
  bracket(quoted_exe "${TEST_EXECUTABLE}")
  bracket(quoted_dir "${TEST_WORKING_DIR}")
  set(script "")
  set(count 0)
  # A case outside any test suite has no testsuite attribute.
  string(REGEX MATCHALL "<TestCase name=\"[^\"]*\"( testsuite=\"[^\"]*\")?" cases "${output}")
  foreach(case IN LISTS cases)
    string(REGEX REPLACE "^<TestCase name=\"([^\"]*)\".*$" "\\1" name "${case}")
    set(suite "")
    if(case MATCHES " testsuite=\"([^\"]*)\"$")
      set(suite "${CMAKE_MATCH_1}")
    endif()
    unescape(name "${name}")
    unescape(suite "${suite}")
    # doctest reads ',' in a filter as a separator between filters.
    string(REPLACE "," "\\," filter "${name}")
    bracket(quoted_name "${name}")
    bracket(quoted_filter "--test-case=${filter}")
    set(labels "")
    if(NOT suite STREQUAL "")
      bracket(labels "${suite}")
      set(labels " LABELS ${labels}")
    endif()
    string(APPEND script "add_test(${quoted_name} ${quoted_exe} ${quoted_filter})\n"
                         "set_tests_properties(${quoted_name} PROPERTIES WORKING_DIRECTORY ${quoted_dir} "
                         "${TEST_PROPERTIES}${labels})\n")
    math(EXPR count "${count} + 1")
  endforeach()
  if(count EQUAL 0)
    message(FATAL_ERROR "${TEST_EXECUTABLE} lists no test case:\n${output}")
  endif()
  file(WRITE "${CTEST_FILE}" "${script}")
  return()
endif()

set(tutti_discover_tests_script ${CMAKE_CURRENT_LIST_FILE})

function(tutti_discover_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PROPERTIES")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests.cmake")
  list(JOIN arg_PROPERTIES " " properties)
  add_custom_command(
    TARGET ${target} POST_BUILD
    BYPRODUCTS "${tests_file}"
    COMMAND "${CMAKE_COMMAND}" -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
            -D "TEST_WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}" -D "TEST_PROPERTIES=${properties}"
            -D "CTEST_FILE=${tests_file}" -P "${tutti_discover_tests_script}"
    VERBATIM)
  file(WRITE "${include_file}"
       "if(EXISTS \"${tests_file}\")\n"
       "  include(\"${tests_file}\")\n"
       "else()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
