"""Microbenchmarks of this machine for issue 7's calibration: the one-way time of the pipe between
two pinned processes, the nominal peak of a core, and a model's linear layers at 1-16 rows. Stage
times come from real decoding in the stage processes (traces and autoregressive step times). Measurement only: fitting them to the
cost model is the analytical side's job."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time

import numpy as np

from dfvg_dse.processes import ignore_interrupts, interrupts_deferred, spawning_quietly
from dfvg_dse.reference.stages import single_threaded_environment, stage_cpus
from dfvg_dse.reference.tiny_lm import _linear


def _receive(conn, spin: bool) -> bytes:
    if spin:
        while not conn.poll(0):
            pass
    return conn.recv_bytes()


def _echo(conn, cpu, spin: bool) -> None:
    ignore_interrupts()  # spawned under interrupts_deferred: Ctrl-C is the parent's
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    while True:
        try:
            data = _receive(conn, spin)
        except (EOFError, OSError):  # the parent is gone
            return
        if not data:
            return
        conn.send_bytes(data)


def pipe_times(sizes, count: int, spin: bool = True) -> list[dict]:
    """Median one-way seconds (round trip / 2) of messages of each size between two pinned
    processes that spin for messages (as the stages do) or block: the floor of every emulated
    link. Records: bytes, seconds, count."""
    cpus = stage_cpus()
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    echo = context.Process(target=_echo, args=(theirs, cpus[1] if len(cpus) > 1 else None, spin), daemon=True)
    with spawning_quietly():
        echo.start()
    records = []
    try:
        for size in sizes:
            payload = b"x" * size
            times = []
            for _ in range(count):
                start = time.perf_counter()
                mine.send_bytes(payload)
                _receive(mine, spin)
                times.append((time.perf_counter() - start) / 2)
            records.append({"bytes": size, "seconds": statistics.median(times), "count": count})
    finally:
        with interrupts_deferred():  # the echo process is waited for even on a second Ctrl-C
            mine.send_bytes(b"")
            echo.join(timeout=5)
            if echo.is_alive():
                echo.kill()
                echo.join()
    return records


def _cpuinfo() -> tuple[list[float], list[str]] | None:
    """(the cores' MHz, the first core's flags) from /proc/cpuinfo; None when it is unreadable."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return None
    mhz = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    flags = next((line.split(":")[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return mhz, flags


def core_peak_fp32_flops_per_s() -> tuple[float, float, str]:
    """Nominal fp32 peak of one core from /proc/cpuinfo (clock x SIMD lanes x 2 pipes x 2 flop
    per FMA), its clock, and how it was derived; 2 GHz AVX2 when the file is unreadable."""
    info = _cpuinfo()
    if info is None:
        return 64e9, 2e9, "assumed 2 GHz x 8 lanes x 2 pipes x 2 flop (no /proc/cpuinfo)"
    mhz, flags = info
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fma = "fma" in flags or "avx512f" in flags
    clock = max(mhz) * 1e6 if mhz else 2e9
    peak = clock * lanes * 2 * (2 if fma else 1)  # two vector pipes; an FMA is two flops
    return peak, clock, (f"/proc/cpuinfo: {clock / 1e9:.2f} GHz x {lanes} fp32 lanes x 2 pipes"
                  f"{' x 2 flop per FMA' if fma else ''} = {peak / 1e9:.1f} GFLOP/s per core")


def core_peak_flops_per_s(dtype: str = "float32") -> tuple[float, float, str]:
    """The nominal peak of one core for the backend's dtype: fp32's (core_peak_fp32_flops_per_s), and
    twice that for bfloat16 on a core with avx512_bf16 (VDPBF16PS: two bf16 products per fp32 lane)."""
    peak, clock, source = core_peak_fp32_flops_per_s()
    if dtype != "bfloat16":
        return peak, clock, source
    if "avx512_bf16" in (_cpuinfo() or ([], []))[1]:
        return 2 * peak, clock, f"{source}; x 2 for bfloat16 (avx512_bf16: two bf16 products per fp32 lane)"
    return peak, clock, f"{source}; bfloat16 at the fp32 rate (no avx512_bf16)"


LINEAR_ROWS = 16  # row counts measured: every verify and draft level of issue 7's configurations fits


def _linear_pass(weights, x_by_width: dict) -> None:
    for layer in weights.layers:
        for matrix, bias in ((layer.qkv, layer.qkv_bias), (layer.out, layer.out_bias), (layer.up, layer.up_bias),
                             (layer.down, layer.down_bias)):
            _linear(x_by_width[matrix.shape[0]], matrix, bias)
    _linear(x_by_width[weights.head.shape[0]], weights.head, None)


def _numpy_linears(weights):
    """(input widths, inputs of `rows` rows, one pass over every linear layer) of the numpy engine."""
    rng = np.random.default_rng(0)
    widths = {m.shape[0] for layer in weights.layers for m in (layer.qkv, layer.out, layer.up, layer.down)}
    widths.add(weights.head.shape[0])
    dtype = weights.head.dtype
    return (lambda rows: {w: rng.standard_normal((rows, w)).astype(dtype) for w in widths},
            lambda x: _linear_pass(weights, x))


def _time_linears(weights, max_rows: int, repeats: int, cpu, conn) -> None:
    ignore_interrupts()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if getattr(weights, "backend", None) is not None:  # the torch backend's products (reference/torch_lm.py)
        from dfvg_dse.reference.torch_lm import linear_pass_runner
        make_inputs, run = linear_pass_runner(weights)
    else:
        make_inputs, run = _numpy_linears(weights)
    times = {rows: [] for rows in range(1, max_rows + 1)}
    for _ in range(repeats):  # interleaved: a slow moment of the machine spreads over every row count
        for rows in times:
            x = make_inputs(rows)
            start = time.perf_counter()
            run(x)
            times[rows].append(time.perf_counter() - start)
    conn.send([statistics.median(times[rows]) for rows in sorted(times)])
    conn.close()


def linear_row_times(weights, max_rows: int = LINEAR_ROWS, repeats: int = 15, cpu: int | None = None) -> list[float]:
    """Median seconds of every linear layer of a model (the reference engine's own `_linear`, the
    packed matrices; torch's F.linear in the backend's dtype for TorchWeights) over inputs of
    1..max_rows rows, in a single-threaded process pinned to `cpu`:
    how BLAS's small-matrix kernels scale with rows on this core (OpenBLAS's differ per row count:
    here 3 rows took 1.4x as long as 4). Measurement only."""
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    with single_threaded_environment(), spawning_quietly():
        child = context.Process(target=_time_linears, args=(weights, max_rows, repeats, cpu, theirs), daemon=True)
        child.start()
    theirs.close()
    try:
        return mine.recv()
    finally:
        with interrupts_deferred():
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
                child.join()
