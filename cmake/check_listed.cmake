# kharness_check_listed(DIR PATTERN LISTED WHERE): the sources are listed by hand (a new file is a
# visible change in WHERE), and this keeps the lists from falling behind: every file under DIR
# matching PATTERN (searched recursively) must be in LISTED, given relative to DIR, or the
# configure step fails naming the file and the list to add it to. Run at configure time only, so
# an unlisted file stops the next fresh configure (CI), not every build.
function(kharness_check_listed dir pattern listed where)
  file(GLOB_RECURSE _on_disk RELATIVE "${dir}" "${dir}/${pattern}")
  foreach(_file IN LISTS _on_disk)
    if(NOT _file IN_LIST listed)
      message(FATAL_ERROR "${_file} (under ${dir}) is in no source list: add it to ${where}")
    endif()
  endforeach()
endfunction()
