#!/bin/sh
# install-deb.sh PATH_TO_DEB
#
# Installs ensemble-serve's Debian package the one way both tested paths do:
# scripts/package-test.sh runs it inside its debootstrap chroot (Debian 12
# minbase) and docker/Dockerfile runs it in its runtime stage (debian:12-slim).
# Keeping the two on one script means the image installs the package exactly
# as the chroot test proved it installs.
#
# Interface (stable; docker/Dockerfile depends on it):
#   scripts/install-deb.sh PATH_TO_DEB
#     PATH_TO_DEB  the package file, e.g. ensemble-serve_0.1.0_amd64.deb; a
#                  relative path is taken from the current directory.
#   Runs as root. Does `apt-get update`, then
#   `apt-get install -y --no-install-recommends ./PATH_TO_DEB`, so that apt
#   resolves the package's Depends: (LibTorch, gRPC, ...) from the system's
#   configured Debian registry itself. Nothing else: it neither cleans apt's
#   lists nor creates users (the package's postinst does that).
#   Exit status: 0 installed; 2 usage error (no argument, not a .deb file);
#   otherwise apt-get's status.
#   POSIX sh only (debian:12-slim and minbase both have dash).
set -eu

if [ "$#" -ne 1 ]; then
  echo "usage: $0 PATH_TO_DEB" >&2
  exit 2
fi
deb=$1
case "$deb" in
  *.deb) ;;
  *) echo "install-deb: $deb: not a .deb file name" >&2; exit 2 ;;
esac
if [ ! -f "$deb" ]; then
  echo "install-deb: $deb: no such file" >&2
  exit 2
fi
# apt-get takes a local package only as a path (with a slash); ./ makes a
# bare file name one.
case "$deb" in
  /*) ;;
  *) deb=./$deb ;;
esac

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "$deb"
