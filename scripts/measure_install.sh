#!/usr/bin/env bash
# Install sizes recorded in docs/benchmarks.md: a fresh venv with google-adk, then the built wheel (light), and a
# second venv with CPU torch and the `embeddings` extra. Usage: scripts/measure_install.sh [python3] (needs the
# network or a warm pip cache; takes a few minutes). Leaves nothing behind. PyTorch's index is asked with no retries
# and a short timeout, as in the Makefile: offline, pip's default retries cost about 55 s for each of torch's wheels.
set -euo pipefail
PY=${1:-python3}
ADK=${ADK:-2.13.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip wheel -q --no-deps -w "$work/dist" .
wheel=$(ls "$work"/dist/aether_context_adk-*.whl)
size() { du -sm "$1" | cut -f1; }

"$PY" -m venv "$work/light"
"$work/light/bin/pip" install -q "google-adk==$ADK"
echo "google-adk==$ADK alone: $(size "$work/light") MB"
start=$(date +%s); "$work/light/bin/pip" install -q "$wheel"; end=$(date +%s)
echo "+ aether-context-adk: $(size "$work/light") MB ($((end - start)) s)"
(cd "$work" && HF_HUB_OFFLINE=1 "$work/light/bin/python" -W error -c \
  "import sys, aether_context; assert 'torch' not in sys.modules; print('imports without torch')")

"$PY" -m venv "$work/full"
"$work/full/bin/pip" install -q "google-adk==$ADK"
"$work/full/bin/pip" install -q --retries 0 --timeout 5 torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu
"$work/full/bin/pip" install -q "$wheel[embeddings]"
echo "+ CPU torch + aether-context-adk[embeddings]: $(size "$work/full") MB"
