"""Plain data across the sandbox boundary: what the grader sends comes back equal, and what a sandbox
writes is validated (no pickle, no object arrays, bounded sizes, known tags only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from grader.checks import Array, Case, Outcome, to_plain
from grader.grading import wire


def test_cases_round_trip_with_tensors_dtypes_generators_and_0d_values(tmp_path):
    g = torch.Generator().manual_seed(7)
    torch.randn(3, generator=g)  # a generator that has already been used
    cases = [Case(args=(torch.randn(2, 3), torch.tensor(1.5), torch.ones(2, dtype=torch.bfloat16)),
                  kwargs={"dtype": torch.float16, "generator": g, "n": 3, "x": float("inf"), "t": (1, "a")},
                  label="everything", max_numel=10)]
    wire.write(tmp_path, cases)
    (back,) = wire.read(tmp_path)
    assert back.label == "everything" and back.max_numel == 10
    for a, b in zip(cases[0].args, back.args):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert back.kwargs["dtype"] is torch.float16 and back.kwargs["t"] == (1, "a")
    assert back.kwargs["x"] == float("inf")
    assert torch.equal(torch.randn(4, generator=back.kwargs["generator"]), torch.randn(4, generator=g))


def test_outcomes_keep_0d_arrays(tmp_path):
    out = Outcome(output=to_plain((torch.tensor(2.0), torch.zeros(0, 3))))
    wire.write(tmp_path, [out])
    (back,) = wire.read(tmp_path)
    assert back.output[0].value.shape == () and back.output[1].value.shape == (0, 3)


def test_object_arrays_are_refused(tmp_path):
    wire.write(tmp_path, [Outcome(output=Array("numpy", "float64", np.zeros(2)))])
    np.save(tmp_path / "0.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(wire.WireError, match="dtype object"):
        wire.read(tmp_path)


@pytest.mark.parametrize("doc, words", [
    ({"$evil": 1}, "unknown tag"),
    ({"$array": 0, "kind": "torch", "dtype": "float32"}, "missing"),
    ({"$array": 99999, "kind": "torch", "dtype": "float32"}, "bad array reference"),
    ({"$float": "1e400"}, "bad float"),
    ({"$Outcome": {"no_such_field": 1}}, "bad Outcome"),
])
def test_malformed_documents_are_refused(tmp_path, doc, words):
    (tmp_path / "data.json").write_text(json.dumps(doc))
    with pytest.raises(wire.WireError, match=words):
        wire.read(tmp_path)


def test_oversized_and_missing_results_are_refused(tmp_path, monkeypatch):
    with pytest.raises(wire.WireError, match="no results"):
        wire.read(tmp_path)
    wire.write(tmp_path, [Outcome(output=Array("numpy", "float64", np.zeros(100)))])
    monkeypatch.setattr(wire, "MAX_TOTAL_ELEMENTS", 50)
    with pytest.raises(wire.WireError, match="too many numbers"):
        wire.read(tmp_path)
    (tmp_path / "data.json").write_text("x" * 10)
    monkeypatch.setattr(wire, "MAX_JSON_BYTES", 5)
    with pytest.raises(wire.WireError, match="too large"):
        wire.read(tmp_path)


def test_outcome_fields_are_type_checked():
    with pytest.raises(wire.WireError, match="largest_numel"):
        wire.outcome_from_wire(Outcome(largest_numel="lots"))
    ok = wire.outcome_from_wire(Outcome(error_types=["ValueError", "Exception"]))
    assert ok.error_types == ("ValueError", "Exception")
