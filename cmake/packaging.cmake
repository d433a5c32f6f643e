# Debian packages: `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (so that GNUInstallDirs picks Debian's
# multiarch libdir, lib/x86_64-linux-gnu) makes one package per install
# component:
#   libtutti0      lib      libtutti.so.0 (the C ABI; Depends from dpkg-shlibdeps)
#   libtutti-dev   dev      tutti.h + tutti_completion.h + tutti_p2p.h, libtutti.so,
#                           CMake (find_package(tutti)) and pkg-config (tutti.pc) files
#   tutti-bin      bin      tuttirun (Depends from dpkg-shlibdeps)
#   python3-tutti  python3  the Python package in /usr/lib/python3/dist-packages,
#                           loading libtutti.so.0 from the linker's path
# The wheel of pyproject.toml uses a fifth component, python (SKBUILD only).
include(GNUInstallDirs)

if(NOT SKBUILD)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/python/tutti
    DESTINATION lib/python3/dist-packages
    COMPONENT python3
    PATTERN "__pycache__" EXCLUDE
    PATTERN "*.pyc" EXCLUDE)
endif()

set(CPACK_PACKAGE_NAME tutti)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Collective communication for data-parallel training (Horovod-style)")
set(CPACK_PACKAGE_CONTACT "tutti developers <tutti@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_COMPONENTS_ALL lib dev bin python3)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(_tutti_deb_version "${PROJECT_VERSION}-1")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libtutti0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIB_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# ldconfig runs after the library is installed or removed.
file(WRITE ${CMAKE_BINARY_DIR}/packaging/lib/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/lib/triggers)
set(CPACK_COMPONENT_LIB_DESCRIPTION "tutti's C library (libtutti.so.0, the stable C ABI)")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtutti-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libtutti0 (= ${_tutti_deb_version})")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "tutti's C headers, CMake package (find_package(tutti)) and pkg-config file")

set(CPACK_DEBIAN_BIN_PACKAGE_NAME tutti-bin)
set(CPACK_DEBIAN_BIN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_BIN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_BIN_PACKAGE_RECOMMENDS "openssh-client")
set(CPACK_COMPONENT_BIN_DESCRIPTION "tuttirun, the launcher of tutti jobs (local, ssh, mpirun)")

set(CPACK_DEBIAN_PYTHON3_PACKAGE_NAME python3-tutti)
set(CPACK_DEBIAN_PYTHON3_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON3_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON3_PACKAGE_DEPENDS "python3, libtutti0 (>= ${_tutti_deb_version})")
set(CPACK_DEBIAN_PYTHON3_PACKAGE_RECOMMENDS "python3-torch, tutti-bin")
set(CPACK_COMPONENT_PYTHON3_DESCRIPTION "tutti's Python and PyTorch bindings (tutti.torch)")

include(CPack)
