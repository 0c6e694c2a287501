#!/usr/bin/env bash
# Builds a Python 3.11 base image (Debian bookworm) from Debian's packages,
# for a machine that cannot pull from an image registry. The Dockerfiles take
# it as PYTHON_IMAGE in place of python:3.11-slim-bookworm.
#
#   deploy/docker/base-image.sh [TAG]        (root; debootstrap and docker)
#
# The image trusts the CA bundle this machine's pip trusts (a proxy that
# re-signs TLS needs it). It carries no wheels: a build that needs a wheel
# only this machine has gets it over HTTP (services/stage0/Dockerfile,
# TORCH_FIND_LINKS), so no image holds it.
set -euo pipefail

tag=${1:-antiphon/python:3.11-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

debootstrap --variant=minbase \
  --include=python3,python3-venv,python-is-python3,ca-certificates \
  bookworm "$root" "$mirror" >/dev/null

cert=$(python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -n1)
{
  echo "[global]"
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    cp "$cert" "$root/etc/ssl/certs/antiphon-host-ca.crt"
    echo "cert = /etc/ssl/certs/antiphon-host-ca.crt"
  fi
} >"$root/etc/pip.conf"
# What the slim image has and the Dockerfiles rely on: apt lists are fetched
# by the RUN that needs them, nothing cached in the layer.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin

tar -C "$root" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$tag" >/dev/null
echo "$tag"
