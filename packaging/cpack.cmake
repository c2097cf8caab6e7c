# SPDX-License-Identifier: BSD-3-Clause
# Debian packages, built by CPack from the install components
# (tools/package.sh; docs/releasing.md):
#   librlock0     lib   the shared library (its SONAME's package name)
#   librlock-dev  dev   headers, static library, pkg-config file, CMake
#                       package, man3 pages
#   rlock         tool  rlock(1), its man page, bash completion
# CPack rather than debhelper: the packages come from the same install
# rules as `cmake --install`, so what a package holds is what the install
# check tests, and no second description of the files can drift from it.
# Configure with -DCMAKE_INSTALL_PREFIX=/usr for Debian's paths (the
# multiarch library directory comes from GNUInstallDirs then).

set(RLOCK_PACKAGE_MAINTAINER "rlock authors <rlock@invalid>" CACHE STRING
    "Maintainer field of the Debian packages")

# Each package carries the license as Debian wants it.
foreach(comp_pkg lib:librlock${PROJECT_VERSION_MAJOR} dev:librlock-dev tool:rlock)
  string(REPLACE ":" ";" _cp "${comp_pkg}")
  list(GET _cp 0 _comp)
  list(GET _cp 1 _pkg)
  install(FILES ${CMAKE_SOURCE_DIR}/LICENSE
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${_pkg}
          RENAME copyright COMPONENT ${_comp})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rlock)
set(CPACK_PACKAGE_VENDOR "the rlock authors")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${RLOCK_PACKAGE_MAINTAINER}")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/pkg)
set(CPACK_COMPONENTS_ALL lib dev tool)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/rlock/rlock")
# Dependencies on other packages from the ELF files (dpkg-shlibdeps), and
# between these packages from the components' own dependencies.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

set(CPACK_DEBIAN_LIB_PACKAGE_NAME librlock${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# A shlibs file (for dpkg-shlibdeps of packages built against this one).
# ldconfig needs no setting: for a library installed under /lib or /usr/lib
# (the multiarch directory included, so with the /usr prefix above) CPack
# writes postinst and postrm maintainer scripts that run it on configure
# and remove. These are scripts, not the "activate-noawait ldconfig" dpkg
# trigger that dh_makeshlibs would declare.
set(CPACK_DEBIAN_LIB_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME librlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libhiredis-dev, libssl-dev, pkg-config | pkgconf")
if(RLOCK_HAVE_CARES)
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libc-ares-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
# The event-loop adapters' loops: a program that uses one has its -dev.
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "libevent-dev, libuv1-dev, libev-dev")

set(CPACK_DEBIAN_TOOL_PACKAGE_NAME rlock)
set(CPACK_DEBIAN_TOOL_PACKAGE_SECTION utils)

# The first line of each is Debian's one-line summary (so no common
# summary is put before it).
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(CPACK_DEBIAN_LIB_DESCRIPTION "distributed locks for C programs, on Redis (library)
librlock gives processes on one or many machines mutual exclusion through
a Redis or Valkey server they share: leases renewed by a watchdog, fencing
tokens, FIFO waits woken by pub/sub, Sentinel, Cluster, Redlock and TLS.
License: BSD-3-Clause.")
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed locks for C programs, on Redis (development files)
Headers, static library, pkg-config files, CMake package and man pages for
librlock, and the event-loop API's adapters for libevent, libuv and libev
(headers, each with a pkg-config name). License: BSD-3-Clause.")
set(CPACK_DEBIAN_TOOL_DESCRIPTION "run a command under a distributed lock kept in Redis
rlock(1) runs a command while holding a lock in Redis or Valkey, like
flock(1) across machines, and shows and releases locks for operators.
License: BSD-3-Clause.")

include(CPack)
cpack_add_component(lib DISPLAY_NAME "librlock${PROJECT_VERSION_MAJOR}")
cpack_add_component(dev DISPLAY_NAME "librlock-dev" DEPENDS lib)
cpack_add_component(tool DISPLAY_NAME "rlock" DEPENDS lib)
