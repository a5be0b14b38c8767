#!/usr/bin/env bash
# The dataset's own GPU rows, re-measured on a lent GPU machine (issue 14, deliver 6; docs/engines.md,
# "Your own device"). It runs `calibrate --torch-device cuda:0 --dataset-grid` (whole-model forwards, the
# 24 the dataset keeps) for the models named as MODEL:DTYPE and copies each run's rows, the GPU's
# nvidia-smi line and a log to $OUT, then benchmarks/torch_bench_depth.py's check of the timing method on the
# GPU (depth.txt, about half a minute). A model that fails is logged and the next one runs.
#
# The machine has torch, numpy, scipy, pandas and click, not tomli-w: carry its (pure-Python) wheel.
# Here, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl tomli-w
# The shipped rows are on an H200, so ask for that kind (on another GPU the rows would be new sources
# beside the H200 ones, not their replacement). All six models fit one call of the device tool's 10-minute
# limit: the dataset grid's forwards come to about 2e15 FLOPs for llama-3.1-70b (7 timings each: ~25 s at
# 600 TFLOP/s) and a tenth of that for the 8B models, plus each process's start and random weights:
#   run(kind="nvidia-h200", carry=[".whl"], timeout_s=560, command="bash benchmarks/gpu_recalibrate.sh
#       llama-3.1-8b:bfloat16 qwen3-8b:bfloat16 llama-3.1-70b:bfloat16 qwen2.5-0.5b:bfloat16
#       llama-2-7b:float16 llama-2-13b:float16")
# Each model's rows come back as local-cuda0-MODEL.toml, the model's dots made dashes
# (local-cuda0-llama-3-1-8b.toml). Here, all in one command (every file checked before any is written):
#   dfvg-dse engines adopt FILES_AT/local-cuda0-*.toml --device h200 --out hwdb/measurements \
#       --replace --note "nvidia-smi: $(cat FILES_AT/nvidia-smi.csv)"
# then `dfvg-dse engines fit` and `dfvg-dse validate --anchors` (docs/engines.md records the figures).
# A dry run here, on the CPU and small models:
#   OUT=/tmp/x TORCH_DEVICE=cpu DEPTH_MODEL=llama-68m bash benchmarks/gpu_recalibrate.sh llama-68m:float32
set -uo pipefail
out=${OUT:?"run through the device tool, which sets OUT"}
device=${TORCH_DEVICE:-cuda:0}
if [ $# -lt 1 ] || [ $# -gt 6 ]; then
    echo "name 1 to 6 models as MODEL:DTYPE (9 files come back: one a model, the GPU's line, the log, depth.txt)" >&2
    exit 2
fi
for spec in "$@"; do
    case "$spec" in
        *:float16|*:bfloat16|*:float32) ;;
        *) echo "$spec: give MODEL:DTYPE, DTYPE float16, bfloat16 or float32" >&2; exit 2 ;;
    esac
done
wheels=$(compgen -G "$PWD/.whl/*.whl" | tr '\n' ':')
export PYTHONPATH="$PWD:${wheels}${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -c "import tomli_w, torch, numpy, scipy, pandas, click" || {
    echo "a package is missing: carry tomli-w's wheel in .whl (see this script's header)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$out/nvidia-smi.csv"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee "$out/log.txt"
for spec in "$@"; do
    model=${spec%%:*}
    dtype=${spec#*:}
    start=$(date +%s)
    python3 cli.py calibrate --torch-device "$device" --dataset-grid --model "$model" --dtype "$dtype" \
        --out "/tmp/cal/$model" 2>&1 | tee -a "$out/log.txt"
    rc=${PIPESTATUS[0]}
    # exit 1 is a suspect fit of the device's own profile: its rows are written and come back all the same
    if compgen -G "/tmp/cal/$model/hwdb/measurements/*.toml" > /dev/null; then
        cp "/tmp/cal/$model"/hwdb/measurements/*.toml "$out/"
        echo "$model $dtype: exit $rc, $(( $(date +%s) - start )) s" | tee -a "$out/log.txt"
    else
        echo "$model $dtype: FAILED (exit $rc) after $(( $(date +%s) - start )) s (above)" | tee -a "$out/log.txt"
    fi
done
# the whole-depth timing against the old 2-layers-scaled one on this GPU (docs/engines.md, "Why whole forwards")
python3 benchmarks/torch_bench_depth.py --device "$device" --model "${DEPTH_MODEL:-llama-3.1-8b}" 2>&1 | tee "$out/depth.txt" \
    || echo "torch_bench_depth FAILED (above)" | tee -a "$out/log.txt"
