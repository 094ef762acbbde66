#!/usr/bin/env bash
# Regenerates the PyTorch profiler (Kineto) trace fixtures in this folder: torch.distributed
# pipeline-parallel and multi-dimensional runs on CPU with gloo, one gzipped Chrome trace per
# rank (<job>-rank<R>.json.gz), and truth.json. See README.md.
#
#   tests/data/torch/make_fixtures.sh [JOB...]     (default: all jobs)
#
# Environment:
#   FULCRUM_TORCH_VENV   the virtual environment to create or reuse (default /tmp/fulcrum-torch-venv)
#   FULCRUM_TORCH_WHEEL  a local torch-2.15.0 wheel to install instead of fetching it from PyPI
#   PYTHON               the interpreter that makes the venv (default python3.11, else python3; >= 3.11)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${FULCRUM_TORCH_VENV:-/tmp/fulcrum-torch-venv}
TORCH_VERSION=2.15.0
ALL_JOBS=(gpipe-pp4:4 1f1b-pp4:4 interleaved-pp2:2 zb-pp2:2 pp2-dp2:4 tp2-dp2:4)

start=$(date +%s)

# --- the venv -------------------------------------------------------------------------------
# torch's PyPI wheel pulls in several GB of CUDA packages. On CPU it only needs to import, so
# install it without dependencies, then its pure-Python dependencies, then only the four CUDA
# libraries that the wheel links to and this machine's CUDA toolkit (/usr/local/cuda, on the
# library path) lacks or has too old (libcufile, libcusparseLt, libnvshmem_host; libnccl older
# than 2.30 lacks ncclCommResume). If that still does not import (no CUDA toolkit at all),
# fall back to the full install.
torch_ok() {
  "$VENV/bin/python" - <<EOF >/dev/null 2>&1
import torch, torch.distributed as dist, torch.distributed.pipelining
assert torch.__version__.split("+")[0] == "$TORCH_VERSION", torch.__version__
assert dist.is_available() and dist.is_gloo_available()
EOF
}

if [ ! -x "$VENV/bin/python" ]; then
  PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "torch 2.15 needs Python >= 3.11"'
  "$PY" -m venv "$VENV"
fi
if ! torch_ok; then
  PIP=("$VENV/bin/pip" install --disable-pip-version-check -q)
  "${PIP[@]}" filelock==4.3.1 typing-extensions==4.16.0 setuptools==84.2.1 sympy==1.14.0 \
    mpmath==1.3.0 networkx==3.6.1 jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
  "${PIP[@]}" --no-deps nvidia-cufile==1.17.1.22 nvidia-cusparselt-cu13==0.8.1 \
    nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7
  # last, so that pip does not list torch's uninstalled CUDA requirements as conflicts
  "${PIP[@]}" --no-deps "${FULCRUM_TORCH_WHEEL:-torch==$TORCH_VERSION}"
  if ! torch_ok; then
    echo "torch does not import with the minimal install; installing torch==$TORCH_VERSION with all its dependencies" >&2
    "${PIP[@]}" "${FULCRUM_TORCH_WHEEL:-torch==$TORCH_VERSION}"
    torch_ok
  fi
fi
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'

# --- the jobs -------------------------------------------------------------------------------
if [ $# -gt 0 ]; then
  JOBS=()
  for want in "$@"; do
    found=
    for j in "${ALL_JOBS[@]}"; do [ "${j%%:*}" = "$want" ] && JOBS+=("$j") && found=1; done
    [ -n "$found" ] || { echo "unknown job: $want" >&2; exit 2; }
  done
else
  JOBS=("${ALL_JOBS[@]}")
fi

RAW=$(mktemp -d /tmp/fulcrum-torch-raw.XXXXXX)
trap 'rm -rf "$RAW"' EXIT
export OMP_NUM_THREADS=1
names=()
for j in "${JOBS[@]}"; do
  job=${j%%:*} n=${j##*:}
  t0=$(date +%s)
  if ! timeout 600 "$VENV/bin/torchrun" --standalone --nproc-per-node "$n" \
      "$HERE/pp_jobs.py" --job "$job" --out "$RAW" >"$RAW/$job.log" 2>&1; then
    echo "job $job failed; its log:" >&2
    grep -v -e '^USDT:' -e 'gpuGetDeviceCount failed' "$RAW/$job.log" | tail -40 >&2
    exit 1
  fi
  for ((r = 0; r < n; r++)); do
    gzip -9 -n -c "$RAW/$job-rank$r.json" >"$HERE/$job-rank$r.json.gz"
  done
  names+=("$job")
  echo "$job: $n ranks, $(($(date +%s) - t0)) s"
done
"$VENV/bin/python" "$HERE/make_truth.py" "$RAW" "$HERE/truth.json" "${names[@]}"
echo "done in $(($(date +%s) - start)) s"
