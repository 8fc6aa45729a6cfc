# tutti's components, found one way in tutti's own build (CMakeLists.txt) and in a consumer's
# find_package(tutti) (tutti-config.cmake, which installs this file beside it):
#   tcp  tutti::tcp, the tcp transport (<tutti/transport/tcp.hpp>): standalone Asio's asio.hpp
#        (Debian libasio-dev; or -DTUTTI_ASIO_INCLUDE_DIR=<directory holding asio.hpp>)
#   mpi  tutti::mpi, the MPI transport (<tutti/transport/mpi.hpp>): find_package(MPI COMPONENTS
#        CXX), MPI's C API only
#   cuda tutti::cuda, the CUDA IPC transport (<tutti/transport/cuda_ipc.hpp>, in a .cu file):
#        find_package(CUDAToolkit), the CUDA runtime linked statically (it loads the driver at run
#        time, so a program starts on a machine without one and says so)
#   nccl tutti::nccl, the NCCL transport (<tutti/transport/nccl.hpp>, in a .cu file): as cuda;
#        NCCL itself is loaded at run time (dlopen), never linked
#
# tutti_find_component(<name> [GLOBAL]) defines tutti::<name> (an imported interface target on
# tutti::tutti; GLOBAL in tutti's own build, so that a project that add_subdirectory()s tutti
# sees it) where what it needs is found, and sets tutti_<name>_FOUND; where not, tutti_<name>_WHY
# says why. A macro, so that what find_package() finds (MPI_CXX_*, TUTTI_ASIO_INCLUDE_DIR) stays
# visible to the caller (the pkg-config files are written from it).
macro(tutti_find_component _tc_name)
  set(tutti_${_tc_name}_FOUND FALSE)
  set(tutti_${_tc_name}_WHY "")
  set(_tc_global "")
  if("${ARGN}" STREQUAL "GLOBAL")
    set(_tc_global GLOBAL)
  endif()
  if("${_tc_name}" STREQUAL "tcp")
    find_path(TUTTI_ASIO_INCLUDE_DIR asio.hpp DOC "Directory holding standalone Asio's asio.hpp")
    if(TUTTI_ASIO_INCLUDE_DIR)
      if(NOT TARGET tutti::tcp)
        add_library(tutti::tcp INTERFACE IMPORTED ${_tc_global})
        set_target_properties(tutti::tcp PROPERTIES
          INTERFACE_LINK_LIBRARIES tutti::tutti
          INTERFACE_COMPILE_DEFINITIONS ASIO_STANDALONE)
        # Not the compiler's own directory: -isystem /usr/include breaks libstdc++'s #include_next.
        if(NOT TUTTI_ASIO_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
          # (an imported target's include directories are system ones for whoever links it)
          set_target_properties(tutti::tcp PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_ASIO_INCLUDE_DIR}")
        endif()
      endif()
      set(tutti_tcp_FOUND TRUE)
    else()
      string(CONCAT tutti_tcp_WHY "standalone Asio's asio.hpp not found (Debian: libasio-dev; or pass "
                                  "-DTUTTI_ASIO_INCLUDE_DIR=<directory holding asio.hpp>)")
    endif()
  elseif("${_tc_name}" STREQUAL "mpi")
    # Only MPI's C API is used: skip the deprecated C++ bindings (and their library).
    if(NOT DEFINED MPI_CXX_SKIP_MPICXX)
      set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Use MPI's C API from C++, without the C++ bindings")
    endif()
    find_package(MPI COMPONENTS CXX QUIET)
    if(MPI_CXX_FOUND)
      if(NOT TARGET tutti::mpi)
        add_library(tutti::mpi INTERFACE IMPORTED ${_tc_global})
        set_target_properties(tutti::mpi PROPERTIES INTERFACE_LINK_LIBRARIES "tutti::tutti;MPI::MPI_CXX")
        if(_tc_global)  # a project above tutti's build links it: MPI's target must be seen there too
          set_target_properties(MPI::MPI_CXX PROPERTIES IMPORTED_GLOBAL TRUE)
        endif()
      endif()
      set(tutti_mpi_FOUND TRUE)
    else()
      set(tutti_mpi_WHY "find_package(MPI COMPONENTS CXX) found no MPI (Debian: libopenmpi-dev)")
    endif()
  elseif("${_tc_name}" STREQUAL "cuda" OR "${_tc_name}" STREQUAL "nccl")
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      if(NOT TARGET tutti::cuda)
        add_library(tutti::cuda INTERFACE IMPORTED ${_tc_global})
        set_target_properties(tutti::cuda PROPERTIES
          INTERFACE_LINK_LIBRARIES "tutti::tutti;CUDA::cudart_static;${CMAKE_DL_LIBS}")
        if(_tc_global)
          set_target_properties(CUDA::cudart_static PROPERTIES IMPORTED_GLOBAL TRUE)
        endif()
      endif()
      if("${_tc_name}" STREQUAL "nccl" AND NOT TARGET tutti::nccl)
        add_library(tutti::nccl INTERFACE IMPORTED ${_tc_global})
        set_target_properties(tutti::nccl PROPERTIES INTERFACE_LINK_LIBRARIES tutti::cuda)
      endif()
      set(tutti_${_tc_name}_FOUND TRUE)
    else()
      set(tutti_${_tc_name}_WHY "find_package(CUDAToolkit) found no CUDA toolkit (and a .cu file needs nvcc)")
    endif()
  else()
    set(tutti_${_tc_name}_WHY "no such component (tutti has tcp, mpi, cuda and nccl)")
  endif()
  unset(_tc_global)
endmacro()
