# ctest tests from a doctest program, one per TEST_CASE, each labelled with its area (the label that
# `ctest -L <area>` and scripts/test-area.sh select). CMakeLists.txt's ember_discover_tests() runs
# this script after every link of the program. It lists the cases with their test suite and source
# file (doctest's XML listing) and writes their add_test() calls into CTEST_FILE, which ctest reads.
# (doctest's own doctest_discover_tests labels by test suite only, running the program once per case.)
#
# cmake -D EXE=<program> -D CONFIG=<settings> -D CTEST_FILE=<output> -D WORKDIR=<dir> -P discover_tests.cmake
# The settings file (written by ember_discover_tests) sets:
#   prefix           put before every test name ("emulated: ")
#   label            one label for every case (the emulated program), or empty: the area of its file,
#                    from area_<file> (e.g. area_test_matmul.cpp = core), else default_area
#   suites_only      files whose cases are kept only if their test suite is "devices" or "cuda"
#                    (the CPU-only cases of a device test file, in the emulated program)
#   slow             regular expressions: a case whose name matches one also gets the label slow
#   (a case of the normal program that runs on a GPU also gets the label gpu: see below)
#   properties       more test properties for every case
#   emulator         what runs the program in a cross build (CMAKE_CROSSCOMPILING_EMULATOR: qemu-aarch64), or empty
cmake_minimum_required(VERSION 3.24)
include(${CONFIG})
execute_process(COMMAND ${emulator} ${EXE} --list-test-cases --reporters=xml --no-path-filenames=true
                OUTPUT_VARIABLE listing RESULT_VARIABLE result WORKING_DIRECTORY ${WORKDIR})
if(NOT result EQUAL 0)
  message(FATAL_ERROR "listing the test cases of ${EXE} failed (${result}):\n${listing}")
endif()

# One bracket argument per value, so that test names keep every character but ']==]'.
function(quoted out value)
  set(${out} "[==[${value}]==]" PARENT_SCOPE)
endfunction()
function(xml_unescape out value)
  string(REPLACE "&lt;" "<" value "${value}")
  string(REPLACE "&gt;" ">" value "${value}")
  string(REPLACE "&quot;" "\"" value "${value}")
  string(REPLACE "&apos;" "'" value "${value}")
  string(REPLACE "&amp;" "&" value "${value}")  # last: "&amp;lt;" is "&lt;"
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

list(JOIN properties " " properties)
set(script "")
set(count 0)
set(rest "${listing}")
# (doctest leaves the testsuite attribute out when it is empty.)
set(pattern "<TestCase name=\"([^\"]*)\"( testsuite=\"([^\"]*)\")? filename=\"([^\"]*)\"")
while(TRUE)
  string(REGEX MATCH "${pattern}" match "${rest}")
  if(match STREQUAL "")
    break()
  endif()
  xml_unescape(name "${CMAKE_MATCH_1}")
  xml_unescape(suite "${CMAKE_MATCH_3}")
  get_filename_component(file "${CMAKE_MATCH_4}" NAME)
  string(FIND "${rest}" "${match}" at)
  string(LENGTH "${match}" length)
  math(EXPR at "${at} + ${length}")
  string(SUBSTRING "${rest}" ${at} -1 rest)

  if(file IN_LIST suites_only AND NOT suite MATCHES "^(devices|cuda)$")
    continue()
  endif()
  if(NOT "${label}" STREQUAL "")
    set(labels ${label})
  elseif(DEFINED area_${file})
    set(labels ${area_${file}})
  else()
    set(labels ${default_area})
  endif()
  # The cases that use a GPU when there is one (the cuda area's files, and the device and cuda test
  # suites of the others) also get the label gpu: bench/gpu-check.sh runs `ctest -L gpu`.
  if("${label}" STREQUAL "" AND (suite MATCHES "^(devices|cuda)$" OR labels STREQUAL "cuda"))
    list(APPEND labels gpu)
  endif()
  foreach(regex IN LISTS slow)
    if(name MATCHES "${regex}")
      list(APPEND labels slow)
      break()
    endif()
  endforeach()
  # doctest splits --test-case filters at commas: escape them.
  string(REPLACE "," "\\," filter "${name}")
  quoted(test "${prefix}${name}")
  set(exe "")
  foreach(word IN LISTS emulator ITEMS "${EXE}")
    quoted(word "${word}")
    string(APPEND exe "${word} ")
  endforeach()
  quoted(arg "--test-case=${filter}")
  quoted(workdir "${WORKDIR}")
  quoted(labels "${labels}")
  string(APPEND script "add_test(${test} ${exe}${arg})\n"
         "set_tests_properties(${test} PROPERTIES WORKING_DIRECTORY ${workdir} LABELS ${labels} ${properties})\n")
  math(EXPR count "${count} + 1")
endwhile()
if(count EQUAL 0)
  message(FATAL_ERROR "no test case found in the listing of ${EXE}:\n${listing}")
endif()
file(WRITE ${CTEST_FILE} "${script}")
