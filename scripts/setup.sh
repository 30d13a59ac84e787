#!/usr/bin/env bash
# Set up a fresh machine for the grader, and .venv.
#   bash scripts/setup.sh          the grader: bubblewrap and util-linux (the sandbox), .venv
#   bash scripts/setup.sh --test   and what the test suite needs: slurm-wlm and munge (a one-node
#                                  Slurm cluster the tests start), chromium (opens the class
#                                  report), pytest and the schema tools
#
# System packages come from apt-get when this runs as root on Debian/Ubuntu; elsewhere the
# script says which are missing and what works without them, and goes on.
#
# torch is installed first and on its own, so that resolving the grader's dependencies finds
# it already present and never downloads the CUDA build on a machine without a GPU:
#   - TORCH_SPEC, if set, is what pip installs (e.g. "torch==2.13.0" or a CUDA build's pin);
#   - else, with an NVIDIA GPU (nvidia-smi works), the default torch build;
#   - else the CPU build: a local CPU wheel where pip's find-links offer one (this project's
#     machines carry torch 2.13.0+cpu), otherwise the CPU build from PyTorch's own index.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- system packages ------------------------------------------------------------------------
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
{ command -v prlimit && command -v setpriv; } >/dev/null 2>&1 || need+=(util-linux)
if [ "${1:-}" = "--test" ]; then
    command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need+=(slurm-wlm)
    command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${need[*]} (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
    else
        echo "not installed: ${need[*]} (this is not root on Debian/Ubuntu, so this script cannot install them)." >&2
        echo "  - bubblewrap, util-linux: the sandbox; without them the self-check still runs, with your own" >&2
        echo "    rights, and official grading refuses. Linux: sudo apt-get install bubblewrap util-linux" >&2
        echo "    (dnf/pacman: bubblewrap, util-linux). macOS and Windows have no sandbox: self-check only." >&2
        if [ "${1:-}" = "--test" ]; then
            echo "  - slurm-wlm, munge: the Slurm tests are skipped without them (sudo apt-get install slurm-wlm munge)." >&2
            echo "  - chromium: the test that opens the class report in a browser is skipped without it." >&2
        fi
    fi
fi

# --- the Python environment -----------------------------------------------------------------

# The sandbox runs student code as another, unprivileged user, who must be able to read the
# interpreter: prefer the system Python (world-readable) over one in a private home (pyenv
# keeps it under /root, mode 0700). PYTHON=... chooses another.
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    if /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        PYTHON=/usr/bin/python3
    fi
fi
VENV="${VENV:-.venv}"
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed")'
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    if [ -n "${TORCH_SPEC:-}" ]; then
        "${pip[@]}" "$TORCH_SPEC"
    elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        "${pip[@]}" torch
    else
        wheel=""
        links="${PIP_FIND_LINKS:-$("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)}"
        for dir in $links; do
            for candidate in "${dir#file://}"/torch-*+cpu-*.whl; do
                [ -f "$candidate" ] && wheel="$candidate"
            done
        done
        if [ -n "$wheel" ]; then
            "${pip[@]}" "$wheel"
        else
            "${pip[@]}" torch --index-url https://download.pytorch.org/whl/cpu
        fi
    fi
fi
"${pip[@]}" -e ".$extras"
"$VENV/bin/python" -c 'import torch; print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")'
