# toolchain-aarch64-linux-gnu.cmake — cross-builds waldio for 64-bit ARM
# Linux (the phones' CPU) with Debian's cross toolchain and multiarch SQLite:
#
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install gcc-aarch64-linux-gnu libsqlite3-dev:arm64 qemu-user
#   cmake -S . -B build-aarch64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
#   ninja -C build-aarch64 && (cd build-aarch64 && ctest)
#
# `make test-aarch64` does the same (docs/cross-build.md). Android NDK users
# give CMake the NDK's file instead ($NDK/build/cmake/android.toolchain.cmake).

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Only the target's libraries: find_library looks in /usr/lib/aarch64-linux-gnu
# (libsqlite3-dev:arm64), and pkg-config reads only arm64 .pc files, so the
# host's x86-64 libraries are never linked (libfuse3, for instance, is then
# found only if libfuse3-dev:arm64 is installed).
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# ctest runs the test programs under qemu-user. `-L /`: the dynamic loader
# and libc of the multiarch libc6:arm64 (which libsqlite3-0:arm64 pulls in),
# the same build as the libc found beside libsqlite3. The cross toolchain's
# own copy (-L /usr/aarch64-linux-gnu) is another build of glibc 2.36: its
# loader then loaded /lib/aarch64-linux-gnu/libc.so.6 with libsqlite3, and
# programs spun forever in libc's locks (in pthread_create and in exit).
find_program(WALDIO_QEMU_AARCH64 qemu-aarch64)
if(WALDIO_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${WALDIO_QEMU_AARCH64} -L /)
endif()
