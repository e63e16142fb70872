#!/usr/bin/env bash
# Records the GPU traces in tests/traces/*/gpu_* on a machine with an NVIDIA GPU, into OUTDIR:
# PyTorch/Kineto with memory events (DataLoader with 0 and 4 workers), and TensorFlow's and JAX's
# XSpaces where those frameworks see the GPU. Prints the versions and the GPU it ran on.
set -u
OUT=${1:?usage: record_gpu_traces.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 - <<'PY'
import importlib
for m in ("torch", "tensorflow", "jax", "jaxlib", "xprof"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:  # not installed, or broken
        print(m, "missing:", type(e).__name__)
PY
python3 "$HERE/make_torch_memory_trace.py" "$OUT/pytorch" --workers 0
python3 "$HERE/make_torch_memory_trace.py" "$OUT/pytorch" --workers 4
if python3 -c "import tensorflow as tf, sys; sys.exit(0 if tf.config.list_physical_devices('GPU') else 1)" 2>/dev/null; then
  python3 "$HERE/make_tf_xplane.py" custom_loop "$OUT/tf_custom_loop"
  python3 "$HERE/make_tf_xplane.py" keras_fit "$OUT/tf_keras_fit"
else
  echo "tensorflow: no GPU"
fi
if python3 -c "import jax, sys; sys.exit(0 if jax.devices()[0].platform == 'gpu' else 1)" 2>/dev/null; then
  python3 "$HERE/make_jax_trace.py" "$OUT/jax"
else
  echo "jax: no GPU"
fi
find "$OUT" -type f -printf '%s %p\n'
