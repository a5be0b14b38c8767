#!/usr/bin/env bash
# The dataset's own GPU rows, re-measured on a lent GPU machine (issue 14, deliver 6; docs/engines.md,
# "Your own device"). It runs `calibrate --torch-device cuda:0` for the models named (default: the six of
# hwdb/measurements/torch-h200-calibrate-*.toml, at their dtypes) and copies each run's rows, the GPU's
# nvidia-smi line and a log to $OUT (at most 8 files come back: run at most six models a call).
#
# The machine has torch, numpy, scipy, pandas and click, not tomli-w: carry its wheel. Here, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl tomli-w
# Then, through the device tool (two calls of three models fit its 10-minute limit; on an H200 the 2-layer
# grid took 14-26 s a model, the 8-layer one about four times that at large n):
#   run(command="bash benchmarks/gpu_recalibrate.sh llama-3.1-8b:bfloat16 qwen3-8b:bfloat16 llama-2-7b:float16",
#       carry=[".whl"], timeout_s=560)
# And here, for each file that came back (GPU = the catalog's name of the card, e.g. h200):
#   dfvg-dse engines adopt FILES_AT/local-cuda0-MODEL.toml --device GPU --out hwdb/measurements --replace \
#       --note "nvidia-smi: ..." && dfvg-dse engines fit && dfvg-dse validate --anchors
set -euo pipefail
out=${OUT:?"run through the device tool, which sets OUT"}
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    models=(llama-3.1-8b:bfloat16 qwen3-8b:bfloat16 llama-3.1-70b:bfloat16 qwen2.5-0.5b:bfloat16
            llama-2-7b:float16 llama-2-13b:float16)
fi
if [ ${#models[@]} -gt 6 ]; then
    echo "at most 6 models a call (8 files come back: one a model, the GPU's line and the log)" >&2
    exit 2
fi
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$out/nvidia-smi.csv"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee "$out/log.txt"
for spec in "${models[@]}"; do
    model=${spec%%:*}
    dtype=${spec#*:}
    start=$(date +%s)
    python3 cli.py calibrate --torch-device cuda:0 --model "$model" --dtype "$dtype" --out "/tmp/cal/$model" \
        2>&1 | tee -a "$out/log.txt"
    cp "/tmp/cal/$model"/hwdb/measurements/*.toml "$out/"
    echo "$model $dtype: $(( $(date +%s) - start )) s" | tee -a "$out/log.txt"
done
