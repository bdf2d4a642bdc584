# tests/cli/torch_python.sh — sourced by the tests that check dtrain's files against PyTorch
# (test_export.sh, test_export_graphs.sh): sets TORCH_PY to a Python with torch, torchvision,
# safetensors, numpy and h5py — $DTRAIN_TORCH_PYTHON, else /opt/torchexport/bin/python, created
# from PyPI on demand (test-only; the install is bounded at 6 minutes) — or exits 77 (ctest:
# skipped) with the reason, after "SKIPPED ($TORCH_SKIP_NOTE)" when the caller sets one (what it
# checked before).
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
TORCH_PY=${DTRAIN_TORCH_PYTHON:-/opt/torchexport/bin/python}
if ! "$TORCH_PY" -c "import torch, torchvision, safetensors, h5py" 2>/dev/null; then
  TORCH_PY=/opt/torchexport/bin/python
  echo "# installing torch, torchvision, safetensors from PyPI into /opt/torchexport (test-only)"
  if ! { /usr/bin/python3 -m venv /opt/torchexport &&
         timeout 360 /opt/torchexport/bin/pip install -q --timeout 60 torch torchvision safetensors \
           numpy h5py; } \
      >"$SCRATCH/torch_install.log" 2>&1 ||
     ! "$TORCH_PY" -c "import torch, torchvision, safetensors, h5py" 2>/dev/null; then
    tail -5 "$SCRATCH/torch_install.log"
    echo "SKIPPED${TORCH_SKIP_NOTE:+ ($TORCH_SKIP_NOTE)}: no Python with torch, torchvision and" \
         "safetensors, and pip could not install them from PyPI within 6 minutes (offline?" \
         "slow?); set DTRAIN_TORCH_PYTHON to one"
    exit 77
  fi
fi
