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


KEY = bytes(range(32))


def _stream(tmp_path, *frames: bytes):
    path = tmp_path / "results.stream"
    path.write_bytes(b"".join(frames))
    return path


def _sealed(*frames: bytes, key: bytes = KEY) -> list[bytes]:
    sealer = wire.Sealer(key)
    return [sealer.seal(f) for f in frames]


def test_the_results_stream_round_trips_cells_and_done(tmp_path):
    writer = wire.Writer()
    doc = [[writer.encode(Outcome(output=to_plain(torch.arange(3.0))))]]
    path = _stream(tmp_path, *_sealed(wire.frame({"t": "cell", "index": 1, "ok": True, "output": "hi", "error": "",
                                                  "outcomes": doc}, writer.blobs),
                                      wire.frame({"t": "done", "cells": 2})))
    results = wire.read_stream(path, 2, KEY)
    assert results.done and not results.problem and set(results.cells) == {1}
    ((back,),) = results.cells[1].decoded()
    assert back.output.value.tolist() == [0.0, 1.0, 2.0] and results.cells[1].output == "hi"


FIRST = wire.frame({"t": "cell", "index": 1, "ok": True, "output": "", "error": "", "outcomes": None})


@pytest.mark.parametrize("after, words", [
    # sealed in their place, wrong in themselves
    (lambda s: [s.seal(wire.frame({"t": "cell", "index": 0})), s.seal(wire.frame({"t": "cell", "index": 0}))],
     "second frame"),
    (lambda s: [s.seal(wire.frame({"t": "cell", "index": 7}))], "not in the plan"),
    (lambda s: [s.seal(wire.frame({"t": "cell", "index": True}))], "not in the plan"),
    (lambda s: [s.seal(wire.frame({"t": "what"}))], "unknown type"),
    (lambda s: [s.seal(wire.frame({"t": "done"})), s.seal(wire.frame({"t": "cell", "index": 0}))], "after the end"),
    # broken before the seal is read
    (lambda s: [wire.frame({"t": "done"})[:-3]], "not valid JSON"),
    (lambda s: [wire.FRAME_HEADER.pack(2) + b"[]"], "not an object"),
    (lambda s: [wire.FRAME_HEADER.pack(1 << 30)], "too large"),
    (lambda s: [wire.frame({"t": "cell", "index": 0}, [b"x" * 10])[:-4]], "cut short"),
    # frames the grader's code did not send (issue 27, class 1): no seal, another key, edited, out of order
    (lambda s: [wire.frame({"t": "done", "cells": 3})], "seal does not match"),
    (lambda s: _sealed(wire.frame({"t": "done", "cells": 3}), key=bytes(32)), "seal does not match"),
    (lambda s: [s.seal(wire.frame({"t": "cell", "index": 0, "ok": False}))[:-40]
                + s.seal(wire.frame({"t": "cell", "index": 0, "ok": True}))[-40:]], "seal does not match"),
    (lambda s: [wire.Sealer(KEY).seal(wire.frame({"t": "cell", "index": 0}))], "seal does not match"),
])
def test_a_malformed_or_forged_stream_stops_reading_and_keeps_what_came_before(tmp_path, after, words):
    sealer = wire.Sealer(KEY)
    first = sealer.seal(FIRST)
    results = wire.read_stream(_stream(tmp_path, first, *after(sealer)), 3, KEY)
    assert words in results.problem and 1 in results.cells and not results.done, results.problem


def test_oversized_blobs_and_huge_integers_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(wire, "MAX_CELL_BYTES", 8)
    results = wire.read_stream(_stream(tmp_path, *_sealed(wire.frame({"t": "cell", "index": 0}, [b"x" * 9]))), 1, KEY)
    assert "over the limit" in results.problem
    with pytest.raises(wire.WireError, match="bits"):
        wire.decode([10 ** 30], [])
    with pytest.raises(TypeError, match="bits"):
        to_plain(2 ** 80)


def test_a_missing_stream_is_a_problem_not_a_crash(tmp_path):
    results = wire.read_stream(tmp_path / "nothing", 1, KEY)
    assert results.problem and not results.cells


def test_the_bounds_agree_from_converter_to_reader():
    from grader import checks

    assert 8 * checks.MAX_ELEMENTS <= wire.MAX_CASE_BYTES <= wire.MAX_CELL_BYTES <= wire.MAX_STREAM_BYTES
    assert checks.MAX_INT_BITS == 64


def test_the_harness_replaces_an_oversized_case_by_an_error_and_keeps_the_others(monkeypatch):
    from grader.grading import harness

    monkeypatch.setattr(wire, "MAX_CASE_BYTES", 10_000)
    small = Outcome(output=to_plain(torch.zeros(3)))
    big = Outcome(output=to_plain(torch.zeros(10_000)))
    doc, blobs = harness._encode_cell([[small, big, small]])
    back = wire.decode(doc, blobs)
    assert back[0][0].error is None and back[0][2].error is None
    assert "bytes of results" in back[0][1].error and back[0][1].output is None


def test_cases_keep_their_layout_and_devices_across_the_wire(tmp_path):
    """A transposed, a stride-2 and an expanded tensor reach the sandbox with their strides, and a
    ``torch.device`` argument arrives as one (chapter 4's masks take ``device=``)."""
    import torch

    from grader.checks import Case
    from grader.grading import wire as w
    from solutions.cases.families import expanded, non_contiguous

    xs = (torch.randn(3, 4).t(), non_contiguous(torch.randn(3, 4)), expanded(torch.randn(2, 3), 4),
          torch.randn(5)[1:])
    w.write(tmp_path, [Case(args=xs, kwargs={"device": torch.device("cpu"), "dtype": torch.float8_e4m3fn})])
    (back,) = w.read(tmp_path)
    assert back.kwargs["dtype"] is torch.float8_e4m3fn
    for x, y in zip(xs, back.args):
        assert torch.equal(x, y) and x.stride() == y.stride() and x.shape == y.shape
    assert back.kwargs["device"] == torch.device("cpu")


def test_numpy_scalars_keep_their_type_across_the_wire(tmp_path):
    """A case with numpy scalar inputs (chapter 8's float32 roofline, numpy integer sizes) is graded on those very
    types in the sandbox, not on the Python numbers they would otherwise become."""
    values = [np.float32(1.5), np.float64(2.25), np.int64(7), np.int32(-3), np.uint8(200), np.bool_(True),
              np.float16(0.5)]
    wire.write(tmp_path, [Case(args=tuple(values), label="numpy scalars")])
    (back,) = wire.read(tmp_path)
    for a, b in zip(values, back.args):
        assert type(a) is type(b) and a == b, (a, b)
