#!/usr/bin/env bash
# Installs what fmsim needs to build and test on a Debian/Ubuntu machine, and
# only what is missing: apt-get for the toolchain and libraries. Safe to rerun.
# Optional parts (CUDA, SDL2, cairo) are used when present; the core builds
# and tests with a C compiler, CMake and Criterion alone.
set -euo pipefail

packages=(build-essential cmake pkg-config libcriterion-dev libcairo2-dev libsdl2-dev libyaml-dev
  python3-numpy python3-matplotlib python3-nbclient python3-nbformat python3-ipykernel
  xvfb xauth poppler-utils libxml2-utils
  python3-pytest python3-venv python3-pip python3-setuptools python3-wheel)
# `scripts/install-deps.sh fuzz` (make fuzz only): clang and its libFuzzer runtime too
if [ "${1:-}" = fuzz ]; then packages+=(clang libclang-rt-dev); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing packages (${missing[*]}) and no apt-get to install them" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
