# fleetctl's CMake hook (CMAKE_PROJECT_INCLUDE: included after every project() call).
#
# Records the cmake that runs (CMAKE_COMMAND, CMAKE_VERSION, CMAKE_POLICY_VERSION_MINIMUM) and the
# CUDA compiler CMake chose (with its host compiler, CMAKE_CUDA_HOST_COMPILER: nvcc's -ccbin), as JSON lines appended to $ENV{FLEETCTL_BUILD_RECORD}, and stops the
# configure (before anything compiles) when that compiler is not FLEETCTL_EXPECT_CUDA_COMPILER, the
# one fleetctl asked for (compared by real path).

function(_fleetctl_json_escape out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

function(_fleetctl_append line)
  if(DEFINED ENV{FLEETCTL_BUILD_RECORD})
    file(APPEND "$ENV{FLEETCTL_BUILD_RECORD}" "${line}\n")
  endif()
endfunction()

function(_fleetctl_check_cuda_compiler)
  get_property(done GLOBAL PROPERTY _FLEETCTL_CUDA_CHECKED)
  if(done OR NOT CMAKE_CUDA_COMPILER)
    return()
  endif()
  set_property(GLOBAL PROPERTY _FLEETCTL_CUDA_CHECKED TRUE)
  get_filename_component(real "${CMAKE_CUDA_COMPILER}" REALPATH)
  _fleetctl_json_escape(p "${CMAKE_CUDA_COMPILER}")
  _fleetctl_json_escape(r "${real}")
  _fleetctl_json_escape(h "${CMAKE_CUDA_HOST_COMPILER}")
  _fleetctl_append("{\"kind\": \"cuda_compiler\", \"path\": \"${p}\", \"realpath\": \"${r}\", \"id\": \"${CMAKE_CUDA_COMPILER_ID}\", \"version\": \"${CMAKE_CUDA_COMPILER_VERSION}\", \"host_compiler\": \"${h}\"}")
  message(STATUS "fleetctl: CUDA compiler ${CMAKE_CUDA_COMPILER} (${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION})")
  if(FLEETCTL_EXPECT_CUDA_COMPILER)
    get_filename_component(want "${FLEETCTL_EXPECT_CUDA_COMPILER}" REALPATH)
    if(NOT real STREQUAL want)
      message(FATAL_ERROR "fleetctl: CMake uses the CUDA compiler ${CMAKE_CUDA_COMPILER} (${real}), not ${FLEETCTL_EXPECT_CUDA_COMPILER} (${want}) that fleetctl asked for: the project or a toolchain file sets CMAKE_CUDA_COMPILER; remove that, or set the host var cuda_home to the toolkit you want")
    endif()
  endif()
endfunction()

get_property(_fleetctl_seen GLOBAL PROPERTY _FLEETCTL_RECORDED)
if(NOT _fleetctl_seen)
  set_property(GLOBAL PROPERTY _FLEETCTL_RECORDED TRUE)
  _fleetctl_json_escape(_fleetctl_cmd "${CMAKE_COMMAND}")
  _fleetctl_append("{\"kind\": \"cmake\", \"path\": \"${_fleetctl_cmd}\", \"version\": \"${CMAKE_VERSION}\", \"policy_version_minimum\": \"${CMAKE_POLICY_VERSION_MINIMUM}\"}")
  message(STATUS "fleetctl: cmake ${CMAKE_COMMAND} ${CMAKE_VERSION}, CMAKE_POLICY_VERSION_MINIMUM=${CMAKE_POLICY_VERSION_MINIMUM}")
  if(COMMAND cmake_language)
    # CUDA may be enabled later (enable_language): check again once the top directory is read.
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _fleetctl_check_cuda_compiler)
  endif()
endif()
_fleetctl_check_cuda_compiler()
