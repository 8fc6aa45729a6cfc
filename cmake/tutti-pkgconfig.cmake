# pkg-config files for builds without CMake: tutti.pc (the headers and -pthread), and where the
# targets exist tutti-tcp.pc (Asio) and tutti-mpi.pc (the MPI flags that find_package(MPI) found).
# Installed to ${CMAKE_INSTALL_LIBDIR}/pkgconfig; tutti.pc finds its prefix from its own place
# (${pcfiledir}), so `cmake --install --prefix` elsewhere gives a working file.

# -I flags for `dirs`, leaving out the compiler's own (an -I/usr/include breaks #include_next).
function(tutti_pc_include_flags out)
  set(flags "")
  foreach(dir IN LISTS ARGN)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND flags "-I${dir}")
    endif()
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# Writes the .pc files and installs them (a function, so that its variables stay inside).
function(tutti_write_pkgconfig)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(tutti_pc_prefix "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH tutti_pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
    string(REGEX REPLACE "/$" "" tutti_pc_up "${tutti_pc_up}")
    set(tutti_pc_prefix "\${pcfiledir}/${tutti_pc_up}")
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(tutti_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
  else()
    set(tutti_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()

  set(tutti_pc_files tutti)
  set(tutti_pc_dir "${PROJECT_BINARY_DIR}/pkgconfig-install")

  if(TARGET tutti::tcp)
    tutti_pc_include_flags(asio_flags ${TUTTI_ASIO_INCLUDE_DIR})
    list(JOIN asio_flags " " asio_flags)
    string(STRIP "-DASIO_STANDALONE ${asio_flags}" tutti_pc_tcp_cflags)
    list(APPEND tutti_pc_files tutti-tcp)
  endif()

  if(TARGET tutti::mpi)
    tutti_pc_include_flags(mpi_cflags ${MPI_CXX_INCLUDE_DIRS})
    list(TRANSFORM MPI_CXX_COMPILE_DEFINITIONS PREPEND "-D" OUTPUT_VARIABLE mpi_defs)
    list(PREPEND mpi_cflags ${MPI_CXX_COMPILE_OPTIONS} ${mpi_defs})
    list(JOIN mpi_cflags " " tutti_pc_mpi_cflags)
    # /dir/libmpi.so -> -L/dir -lmpi (no -L for the linker's own directories); flags as they are.
    set(mpi_libs "")
    foreach(lib IN LISTS MPI_CXX_LIBRARIES)
      if(lib MATCHES "^(.*)/lib([^/]+)\\.(so|a)$")
        if(NOT CMAKE_MATCH_1 IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES AND NOT "-L${CMAKE_MATCH_1}" IN_LIST mpi_libs)
          list(APPEND mpi_libs "-L${CMAKE_MATCH_1}")
        endif()
        list(APPEND mpi_libs "-l${CMAKE_MATCH_2}")
      else()
        list(APPEND mpi_libs "${lib}")
      endif()
    endforeach()
    list(JOIN mpi_libs " " mpi_libs)
    string(STRIP "${MPI_CXX_LINK_FLAGS} ${mpi_libs}" tutti_pc_mpi_libs)
    list(APPEND tutti_pc_files tutti-mpi)
  endif()

  foreach(name IN LISTS tutti_pc_files)
    configure_file(${PROJECT_SOURCE_DIR}/cmake/${name}.pc.in ${tutti_pc_dir}/${name}.pc @ONLY)
    install(FILES ${tutti_pc_dir}/${name}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  endforeach()
endfunction()
