# tests/cli/torch_python.sh — sourced by the tests that check dtrain's files against PyTorch
# (test_export.sh, test_export_graphs.sh): sets TORCH_PY to a Python with torch, torchvision,
# safetensors, numpy and h5py — $DTRAIN_TORCH_PYTHON, else /opt/torchexport/bin/python, created
# from PyPI on demand (common.sh pypi_python: test-only, bounded at 6 minutes) — or exits 77
# (ctest: skipped) with the reason, after "SKIPPED ($TORCH_SKIP_NOTE)" when the caller sets one
# (what it checked before).
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
pypi_python TORCH_PY "${DTRAIN_TORCH_PYTHON:-}" /opt/torchexport \
    "torch, torchvision, safetensors, h5py" torch torchvision safetensors numpy h5py ||
  { echo "SKIPPED${TORCH_SKIP_NOTE:+ ($TORCH_SKIP_NOTE)}: no Python with torch, torchvision and" \
         "safetensors, and pip could not install them from PyPI within 6 minutes (offline?" \
         "slow?); set DTRAIN_TORCH_PYTHON to one"
    exit 77; }
