# Writes OUTPUT defining sb::git_commit(); rewrites it only when the commit changed.
execute_process(COMMAND git -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  # A copy without .git (a tarball, a remote build machine) may say which commit it is.
  if(DEFINED ENV{SCALEBENCH_GIT_COMMIT})
    set(commit "$ENV{SCALEBENCH_GIT_COMMIT}")
  else()
    set(commit "unknown")
  endif()
endif()
set(content "namespace sb { const char* git_commit() { return \"${commit}\"; } }\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
