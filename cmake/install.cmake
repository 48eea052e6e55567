# What `cmake --install` gives C users besides the header and the libraries:
#
#   <libdir>/pkgconfig/waldio.pc          pkg-config --cflags --libs waldio
#   <libdir>/cmake/waldio/                find_package(waldio) ->
#       waldioConfig.cmake                  waldio::waldio         (shared)
#       waldioConfigVersion.cmake           waldio::waldio_static  (static)
#       waldioTargets*.cmake
#
# Both are relocatable: they find the installed files relative to their own
# location, so `cmake --install build --prefix DIR` works for any DIR. Both
# also name where the loadable extension (waldio.so) and the preload library
# are: pkg-config --variable=extension waldio, WALDIO_EXTENSION in CMake.

include(CMakePackageConfigHelpers)
set(_waldio_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/waldio)

install(EXPORT waldioTargets NAMESPACE waldio:: DESTINATION ${_waldio_cmake_dir})
configure_package_config_file(cmake/waldioConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/waldioConfig.cmake
  INSTALL_DESTINATION ${_waldio_cmake_dir}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/waldioConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/waldioConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/waldioConfigVersion.cmake
        DESTINATION ${_waldio_cmake_dir})

# pkg-config: prefix relative to the .pc file's own directory.
file(RELATIVE_PATH _waldio_pc_to_prefix
     /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" _waldio_pc_to_prefix "${_waldio_pc_to_prefix}")
configure_file(cmake/waldio.pc.in ${CMAKE_CURRENT_BINARY_DIR}/waldio.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/waldio.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
