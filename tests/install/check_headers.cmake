# rg_check_api_headers(<include_dir> <errors_var>): the #include lines of every header under
# <include_dir>/ringguard. An installed header may include only the C++ standard library (<name>: no folder,
# no extension) and other installed ringguard headers ("ringguard/...", present under <include_dir>).
# Anything else is a private header (src/<layer>/, not installed) or a third-party one (spdlog, fmt, MPI,
# CUDA, NCCL, ...) that every consumer of the API would need too. <errors_var> gets one entry per offending
# line ("<header>: <line>"), empty when all are clean.
# Used by run_consumer.cmake (install_consumer) and tested by check_headers_test.cmake.
function(rg_check_api_headers include_dir errors_var)
  set(errors "")
  file(GLOB_RECURSE headers "${include_dir}/ringguard/*")
  foreach(h IN LISTS headers)
    file(STRINGS "${h}" lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS lines)
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<[a-z_]+>")
        continue()
      endif()
      # (Not one condition with AND: ${CMAKE_MATCH_1} would be expanded before MATCHES sets it.)
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"](ringguard/[^>\"]+)[>\"]")
        if(EXISTS "${include_dir}/${CMAKE_MATCH_1}")
          continue()
        endif()
      endif()
      list(APPEND errors "${h}: ${line}")
    endforeach()
  endforeach()
  set(${errors_var} "${errors}" PARENT_SCOPE)
endfunction()
