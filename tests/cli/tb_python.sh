# tests/cli/tb_python.sh — sourced by the TensorBoard test: sets TB_PY to a Python with TensorBoard
# (installed from PyPI, for tests only, into ${DTRAIN_TB_VENV:-/opt/tbtest}, created on demand),
# or exits 77 (ctest: skipped) with the reason when it cannot be had (no network, no venv module).
TB_VENV=${DTRAIN_TB_VENV:-/opt/tbtest}
TB_PY=$TB_VENV/bin/python
if ! "$TB_PY" -c "import tensorboard.backend.event_processing.event_accumulator" 2>/dev/null; then
  echo "# installing TensorBoard from PyPI into $TB_VENV (test-only)"
  if ! { /usr/bin/python3 -m venv "$TB_VENV" && "$TB_VENV/bin/pip" install -q --timeout 30 tensorboard; } \
      >"$SCRATCH/tb_install.log" 2>&1 ||
     ! "$TB_PY" -c "import tensorboard.backend.event_processing.event_accumulator" 2>/dev/null; then
    tail -5 "$SCRATCH/tb_install.log"
    echo "SKIPPED: TensorBoard is not installed in $TB_VENV and pip could not install it from PyPI" \
         "(offline?); set DTRAIN_TB_VENV to a venv holding the tensorboard package"
    exit 77
  fi
fi
