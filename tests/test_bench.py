"""Chapter 9's benchmark (``grader/dev/attention_bench.py``): a quick run end to end, its JSON schema, the loader.

The quick run uses tiny sizes, so its numbers mean nothing; what is pinned down is that every method
either ran (and then has positive time, throughput and memory) or says why not, that FLOPs come from
chapter 8's ``attention_flops``, that the ratios are the ones the schema defines, and that the record
names no host. Recorded runs under ``book/ch09_flash/data/`` are validated with the same function.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.dev.attention_bench import (
    DATA_DIR,
    METHODS,
    SCHEMA,
    PeakTensorBytes,
    build_parser,
    load_recorded,
    parse_case,
    result_rows,
)
from solutions.complexity import attention_flops

REPO = Path(__file__).resolve().parents[1]
STATUSES = {"ok", "unavailable", "skipped", "error"}


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def validate_run(run: dict) -> None:
    """Assert that ``run`` follows the schema documented at the top of grader/dev/attention_bench.py."""
    assert run["schema"] == SCHEMA
    for key in ("created", "command", "quick", "complete", "device", "env", "timing", "memory", "flops", "results",
                "targets"):
        assert key in run, f"missing {key!r}"
    assert run["command"].startswith("python -m grader.dev.attention_bench")
    assert run["device"]["type"] in ("cpu", "cuda") and run["device"]["name"] and run["device"]["slug"]
    assert isinstance(run["env"]["torch"], str) and run["env"]["python"]
    assert run["results"], "no results"
    for r in run["results"]:
        case = r["case"]
        assert set(case) == {"B", "H", "T", "d", "dtype", "causal"}
        assert r["flops"] == attention_flops(case["T"], case["d"], batch=case["B"], heads=case["H"],
                                             causal=case["causal"])
        assert set(r["methods"]) <= set(METHODS) and r["methods"]
        for name, m in r["methods"].items():
            assert m["status"] in STATUSES, (name, m)
            if m["status"] == "ok":
                for field in ("time_ms", "tflops", "peak_mem_bytes", "reps"):
                    assert positive(m[field]), (name, field, m[field])
                assert isinstance(m["peak_mem_bytes"], int) and isinstance(m["reps"], int)
                assert math.isclose(m["tflops"], r["flops"] / (m["time_ms"] * 1e-3) / 1e12, rel_tol=1e-9)
                assert m["max_abs_diff"] is None or m["max_abs_diff"] >= 0
            else:
                assert isinstance(m["reason"], str) and m["reason"], (name, m)
        if r["baseline"] is not None:
            assert r["baseline"].startswith("sdpa_") and r["methods"][r["baseline"]]["status"] == "ok"
            assert r["baseline_note"]
        for name, ratio in r["ratios"].items():
            if ratio is None:
                continue
            m, b = r["methods"][name], r["methods"][r["baseline"]]
            assert math.isclose(ratio["time_ratio"], m["time_ms"] / b["time_ms"], rel_tol=1e-9)
            assert math.isclose(ratio["tflops_ratio"], m["tflops"] / b["tflops"], rel_tol=1e-9)
            assert math.isclose(ratio["time_ratio"] * ratio["tflops_ratio"], 1.0, rel_tol=1e-9)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-m", "grader.dev.attention_bench", "--quick", "--out", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return out, json.loads(out.read_text()), done.stdout


def test_quick_run_follows_the_schema(quick_run):
    _, run, _ = quick_run
    validate_run(run)
    assert run["quick"] is True and run["complete"] is True


def test_quick_run_measures_every_method_or_says_why(quick_run):
    _, run, stdout = quick_run
    for r in run["results"]:
        assert set(r["methods"]) == set(METHODS)
        for name in ("naive", "tiled", "sdpa_math"):  # these run everywhere
            assert r["methods"][name]["status"] == "ok", r["methods"][name]
        if run["device"]["type"] == "cpu":
            assert r["methods"]["triton"]["status"] in ("skipped", "unavailable")
        assert r["baseline"] is not None and r["ratios"]["tiled"] is not None
        # the naive method holds the whole fp32 score matrix at its peak
        scores = r["case"]["B"] * r["case"]["H"] * r["case"]["T"] ** 2 * 4
        assert r["methods"]["naive"]["peak_mem_bytes"] >= scores
    assert "tiled/" in stdout and "TFLOP/s" in stdout
    for r in run["results"]:  # forward plus backward, through autograd
        back = r["backward"]
        assert back["flops"] == int(back["flops_factor"] * r["flops"])
        for name in ("naive", "sdpa_math"):
            m = back["methods"][name]
            assert m["status"] == "ok" and m["time_ms"] > 0, m
            assert math.isclose(m["tflops"], back["flops"] / (m["time_ms"] * 1e-3) / 1e12, rel_tol=1e-9)
    assert "fwd+bwd" in stdout


def test_triton_column_runs_under_the_interpreter(tmp_path):
    """The Triton column's plumbing (config search, correctness gate, self-check, ratios), in the interpreter."""
    pytest.importorskip("triton")
    out = tmp_path / "interp.json"
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "grader.dev.attention_bench", "--quick", "--cases", "1,1,40,16,fp32,1",
                           "--methods", "triton", "sdpa_math", "--budget", "0.01", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    run = json.loads(out.read_text())
    validate_run(run)
    triton = run["results"][0]["methods"]["triton"]
    assert triton["status"] == "ok", triton
    assert triton["config"]["interpreted"] is True and triton["config"]["block_m"] >= 16
    assert triton["max_abs_diff"] < 1e-5
    assert run["results"][0]["baseline"] == "sdpa_math" and run["results"][0]["ratios"]["triton"] is not None
    assert run["triton_check"] and all(c["ok"] for c in run["triton_check"]), run["triton_check"]
    assert run["env"]["env_vars"]["TRITON_INTERPRET"] == "1"


def test_record_names_no_host(quick_run):
    path, run, _ = quick_run
    text = path.read_text()
    host = socket.gethostname()
    if len(host) >= 4:
        assert host not in text
    assert str(path.parent) not in run["command"]


def test_load_recorded_reads_records_and_ignores_the_rest(quick_run, tmp_path):
    path, run, _ = quick_run
    (tmp_path / "b-run.json").write_text(path.read_text())
    other = dict(run, created="2000-01-01T00:00:00+00:00")
    (tmp_path / "a-old.json").write_text(json.dumps(other))
    (tmp_path / "not-a-record.json").write_text(json.dumps({"schema": "something else"}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("ignored")
    runs = load_recorded(tmp_path)
    assert [Path(r["path"]).name for r in runs] == ["a-old.json", "b-run.json"]  # oldest first
    assert load_recorded(tmp_path, device_type="no-such-device") == []
    assert load_recorded(tmp_path / "missing") == []
    rows = result_rows(runs[-1])
    assert rows and all(positive(row["time_ms"]) and positive(row["tflops"]) for row in rows)
    assert {row["method"] for row in rows} >= {"naive", "tiled", "sdpa_math"}


def test_recorded_runs_in_the_book_are_valid():
    for run in load_recorded(DATA_DIR):
        validate_run(run)


def test_peak_tensor_bytes_counts_live_tensors_not_views():
    with PeakTensorBytes() as mode:
        a = torch.ones(1000)  # 4000 bytes
        b = torch.ones(2000)  # 8000 bytes, 12000 alive
        a.view(10, 100).t()  # views allocate nothing
        b.add_(1)  # in place: nothing new
        del a, b
        c = torch.ones(2500)  # 10000 bytes, alone
    assert mode.peak == 12000
    assert c.numel() == 2500


def test_case_specs_parse_and_reject():
    assert parse_case("4,16,8192,64,bf16,1") == {"B": 4, "H": 16, "T": 8192, "d": 64, "dtype": "bfloat16",
                                                 "causal": True}
    assert parse_case("1,2,64,32") == {"B": 1, "H": 2, "T": 64, "d": 32, "dtype": "float32", "causal": False}
    for bad in ("1,2,3", "1,2,x,4", "1,2,64,32,int8", "1,2,64,32,fp16,maybe", "0,2,64,32"):
        with pytest.raises(Exception, match="case"):
            parse_case(bad)


def test_help_works(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--help"])
    assert exit_info.value.code == 0
    assert "--quick" in capsys.readouterr().out
