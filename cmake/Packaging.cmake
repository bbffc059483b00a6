# Installation rules and the Debian package (CPack DEB).
#
#   scripts/package.sh     # builds the targets below in build/ and writes
#                          # build/package/ensemble-serve_<version>_<arch>.deb
#
# Included at the end of the top-level CMakeLists.txt, after every target is
# defined. Only the component "ensemble-serve" goes into the package: the
# programs a user runs (not the tests, benchmarks or fault-injection hosts),
# the example config, the systemd unit and the documentation. Paths are
# those of a Debian package: CPack installs under /usr (bin/, share/doc/),
# the config and the unit take absolute paths (/etc, /lib/systemd/system as
# Debian 12's packages do). docs/package.md describes the result.

set(ES_PACKAGE_NAME ensemble-serve)
set(ES_PACKAGE_COMPONENT ensemble-serve)
set(ES_PACKAGE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/packaging)
# The Maintainer: field; no project address exists yet (lintian says
# bogus-mail-host until one is given: -DES_PACKAGE_MAINTAINER="Name <mail>").
set(ES_PACKAGE_MAINTAINER "ensemble-serve maintainers <ensemble-serve@localhost>"
    CACHE STRING "Maintainer: of the Debian package")

# ensemble-server finds ensemble-model-host beside its own binary
# (server/router.cc), so both go to /usr/bin.
set(ES_PACKAGE_PROGRAMS ensemble-server ensemble-model-host ensemble-train ensemble-cli ensemble-loadgen
                        ensemble-make-demo)
set(ES_PACKAGE_TARGETS)
foreach(program IN LISTS ES_PACKAGE_PROGRAMS)
  if(TARGET ${program})
    list(APPEND ES_PACKAGE_TARGETS ${program})
  endif()
endforeach()
if(ES_PACKAGE_TARGETS)
  install(TARGETS ${ES_PACKAGE_TARGETS} RUNTIME DESTINATION bin COMPONENT ${ES_PACKAGE_COMPONENT})
endif()
# The package target list for scripts/package.sh (it builds only these).
file(WRITE ${CMAKE_BINARY_DIR}/package-targets.txt "${ES_PACKAGE_TARGETS}\n")

install(FILES ${ES_PACKAGE_DIR}/server.yaml DESTINATION /etc/ensemble-serve COMPONENT ${ES_PACKAGE_COMPONENT})
install(FILES ${ES_PACKAGE_DIR}/ensemble-server.service DESTINATION /lib/systemd/system
        COMPONENT ${ES_PACKAGE_COMPONENT})
install(FILES README.md ${ES_PACKAGE_DIR}/copyright DESTINATION share/doc/${ES_PACKAGE_NAME}
        COMPONENT ${ES_PACKAGE_COMPONENT})
# A native package's changelog.gz (gzip -n: no time stamp, reproducible).
configure_file(${ES_PACKAGE_DIR}/changelog.in ${CMAKE_BINARY_DIR}/packaging/changelog @ONLY)
execute_process(COMMAND gzip -9nc ${CMAKE_BINARY_DIR}/packaging/changelog
                OUTPUT_FILE ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
install(FILES ${CMAKE_BINARY_DIR}/packaging/changelog.gz DESTINATION share/doc/${ES_PACKAGE_NAME}
        COMPONENT ${ES_PACKAGE_COMPONENT})
file(GLOB ES_PACKAGE_DOCS ${CMAKE_CURRENT_SOURCE_DIR}/docs/*.md)
install(FILES ${ES_PACKAGE_DOCS} config/demo.yaml DESTINATION share/doc/${ES_PACKAGE_NAME}
        COMPONENT ${ES_PACKAGE_COMPONENT})

# ---- CPack: one .deb ------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_COMPONENTS_ALL ${ES_PACKAGE_COMPONENT})
set(CPACK_DEB_COMPONENT_INSTALL OFF)  # the one component, as one package
set(CPACK_PACKAGE_NAME ${ES_PACKAGE_NAME})
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "${ES_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "KServe v2 inference server for TorchScript model ensembles")
# CPack puts the summary first and formats the rest (an empty line becomes
# the " ." paragraph break).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "ensemble-server serves the KServe v2 gRPC and HTTP/REST protocols (with
Triton's extensions) and Prometheus metrics. It runs each model in
isolated LibTorch model-host processes that it supervises and talks to
over POSIX shared memory, and combines ensemble members' answers with
their uncertainty.

The package also holds ensemble-cli and ensemble-loadgen (clients),
ensemble-train (ensemble training, torchrun-compatible), the demo tool
ensemble-make-demo, and a hardened systemd unit, ensemble-server.service.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ensemble-serve_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: from the binaries' shared libraries (dpkg-shlibdeps), plus what
# they use without linking it:
#  - passwd: the maintainer scripts' useradd/groupadd/userdel.
#  - libopenblas0-pthread: LibTorch depends on "libblas3 | libblas.so.3", and
#    with that alone apt installs the reference BLAS, about 24 times slower
#    for the models' matrix products (torch_utils/blas_kernels.h).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "passwd, libopenblas0-pthread")
# ensemble-make-demo trains the demo members on Fashion-MNIST when it is there.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "dataset-fashion-mnist")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${ES_PACKAGE_DIR}/conffiles ${ES_PACKAGE_DIR}/postinst ${ES_PACKAGE_DIR}/prerm
                                       ${ES_PACKAGE_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
include(CPack)
