#!/usr/bin/env bash
# Issue 37's GPU measurements in one prepared run on a lent accelerator machine (the device tool's nvidia-h200:
# Python 3.12 with JAX (CUDA), torch and numpy; no Keras, no TensorFlow, no network). It takes, under
# KERAS_BACKEND=jax and then torch:
#   - benchmarks/calibration_scale.py's device section: the 50,000 x 1,000 temperature and ensemble temperature
#     fits, then vector scaling and Dirichlet calibration at K = 1,000;
#   - benchmarks/gpu_step_time.py: the ResNet-20 table (every package loss and the calibration metrics beside
#     Keras' cross-entropy), N = 50,000 under JAX, a smaller N under torch;
# and writes each table, with its log, under $OUT. Every step has a time limit and the whole run stops starting
# steps after BUDGET seconds (default 450), so it ends inside the device's 10-minute command limit and leaves
# device time for a rerun. Steps run most important first.
#
# Before the run, here (where PyPI is reachable), from the repository root, once: the three wheels the GPU
# machine lacks (keras and namex are pure Python, optree a cp312 manylinux wheel; keras' other needs, absl-py,
# numpy, rich, h5py, ml-dtypes and packaging, are on that machine). `.whl/` is git-ignored: never commit it.
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
#   ls .whl    # keras-3.15.1-py3-none-any.whl, namex-0.1.0-py3-none-any.whl,
#              # optree-0.20.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl (2.9 MB together)
#
# Then one device call from the session's own checkout (the device tool sends that one, whichever worktree
# calls), naming the wheels in `carry`:
#
#   run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=540)
#
# The package must import without TensorFlow under JAX and torch (issue 37, item 3): the first step checks it
# and says so in $OUT/environment.txt. Record the tables in benchmarks/RESULTS.md with the GPU's name.
# The device tool returns at most 8 files from $OUT: this run writes 7 (environment.txt and one per step, its
# table and its progress lines together), and prints every table at the end (the reply's output tail).
#
# ONLY="jax_step_time torch_step_time" runs those steps alone (a rerun of what did not finish). A dry run on a
# CPU, with the installed Keras and small sizes:
#   INSTALL=0 N_JAX=256 N_TORCH=256 SIZE=5000x100 OUT=/tmp/gpu_session bash benchmarks/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_session}
BUDGET=${BUDGET:-450}
SIZE=${SIZE:-50000x1000}
N_JAX=${N_JAX:-50000}
N_TORCH=${N_TORCH:-10000}
mkdir -p "$OUT"
START=$SECONDS

if [[ ${INSTALL:-1} == 1 ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || { echo "the wheels did not install: is .whl/ carried?" | tee "$OUT/environment.txt"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3

# step NAME LIMIT COMMAND...: COMMAND under `timeout`, at most LIMIT seconds and never past BUDGET; its output
# (the table on stdout, progress and errors on stderr) in $OUT/NAME.txt
step() {
    local name=$1 limit=$2 left
    shift 2
    if [[ -n ${ONLY:-} && " $ONLY " != *" $name "* ]]; then
        return
    fi
    left=$((BUDGET - (SECONDS - START)))
    if ((left < 20)); then
        echo "skipped: the budget of $BUDGET s is spent" | tee "$OUT/$name.txt"
        return
    fi
    ((limit > left)) && limit=$left
    echo "== $name (at most $limit s, $((SECONDS - START)) s into the run)"
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    echo "   exit $? after $((SECONDS - START)) s"
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    timeout 60 python3 -c "import sys, jax, torch, numpy; print(sys.version.split()[0], 'jax', jax.__version__, \
jax.devices(), 'torch', torch.__version__, torch.cuda.is_available(), 'numpy', numpy.__version__)"
    for backend in jax torch; do
        KERAS_BACKEND=$backend timeout 60 python3 -c "import sys, keras, keras_ils; print(keras.backend.backend(), \
'keras', keras.__version__, 'keras_ils imported; tensorflow imported:', 'tensorflow' in sys.modules)"
    done
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

export KERAS_BACKEND=jax
step jax_calibration_ts 60 python3 benchmarks/calibration_scale.py --device-only --rounds 3 \
    --device-sizes "$SIZE" --device-methods temperature ensemble_temperature
step jax_step_time 270 python3 benchmarks/gpu_step_time.py --n "$N_JAX" --epochs 3 --rounds 1
# one fit each, its compilation included (a Dirichlet fit at 50,000 x 1,000 took 395 s on 2 CPU cores, its
# L-BFGS steps on the host)
step jax_vector 60 python3 benchmarks/calibration_scale.py --device-only --rounds 1 --device-warmup 0 \
    --device-sizes "$SIZE" --device-methods vector
step jax_dirichlet 90 python3 benchmarks/calibration_scale.py --device-only --rounds 1 --device-warmup 0 \
    --device-sizes "$SIZE" --device-methods dirichlet

export KERAS_BACKEND=torch
step torch_calibration_ts 40 python3 benchmarks/calibration_scale.py --device-only --rounds 3 \
    --device-sizes "$SIZE" --device-methods temperature ensemble_temperature
step torch_step_time 120 python3 benchmarks/gpu_step_time.py --n "$N_TORCH" --epochs 3 --rounds 1

for name in jax_calibration_ts jax_step_time jax_vector jax_dirichlet torch_calibration_ts torch_step_time; do
    echo "== $name"
    [[ -f $OUT/$name.txt ]] && grep -v '^\[' "$OUT/$name.txt" | tail -n 40
done
echo "done in $((SECONDS - START)) s; the tables are in $OUT"
