"""The check API: plain-data conversion, comparison, banned calls, module weights, static parsing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from grader import checks
from grader.checks import Case, Check, CheckFailed, NotDeclarative, parse_checks, run_local, to_plain

# Case generators and references used by these tests (resolved by import path, like real checks).


def pair_cases(seed: int, n: int = 3) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [Case(args=(torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g)), label=f"pair {i}")
            for i in range(n)]


def add(a, b):
    return a + b


def add_and_norm(a, b):
    return a + b, float((a + b).norm())


def linear_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [Case(init=(4, 3), args=(torch.randn(5, 4, generator=g),), label="linear 4->3")]


def rows_sum_to_one(cases, outputs):
    for out in outputs:
        assert torch.allclose(out.sum(-1), torch.ones(out.shape[:-1])), "rows must sum to one"


def softmax_last(x):
    return torch.softmax(x, dim=-1)


def softmax_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [Case(args=(torch.randn(3, 5, generator=g),))]


def positive_sqrt(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x.sqrt()


def sqrt_cases(seed: int) -> list[Case]:
    return [Case(args=(torch.tensor([1.0, 4.0]),), label="positive"),
            Case(args=(torch.tensor([-1.0]),), label="negative input", raises="ValueError")]


def shape_judge(cases, outputs):
    for out in outputs:
        out.reshape(3, 5)  # raises on a malformed output rather than asserting


HERE = "tests.test_checks"


def close(**kw) -> Check:
    return Check(kind="close", target="f", cases=f"{HERE}:pair_cases", reference=f"{HERE}:add", **kw)


class TestToPlain:
    def test_tensor_becomes_array_with_dtype(self):
        plain = to_plain(torch.ones(2, 3, dtype=torch.float64))
        assert plain.kind == "torch" and plain.dtype == "float64" and plain.value.shape == (2, 3)

    def test_tuples_become_lists_and_scalars_stay(self):
        assert to_plain((1, 2.5, True, None)) == [1, 2.5, True, None]

    def test_tensor_subclass_is_refused(self):
        class Liar(torch.Tensor):
            pass

        with pytest.raises(TypeError, match="Liar"):
            to_plain(torch.ones(2).as_subclass(Liar))

    def test_object_with_lying_eq_is_refused(self):
        class AlwaysEqual:
            def __eq__(self, other):
                return True

        with pytest.raises(TypeError, match="AlwaysEqual"):
            to_plain(AlwaysEqual())

    def test_object_array_is_refused(self):
        with pytest.raises(TypeError):
            to_plain(np.array([object()]))

    def test_huge_output_is_refused(self, monkeypatch):
        monkeypatch.setattr(checks, "MAX_ELEMENTS", 10)
        with pytest.raises(TypeError, match="elements"):
            to_plain(torch.zeros(11))


class TestCompare:
    def test_within_tolerance_passes(self):
        e, g = to_plain(torch.ones(3)), to_plain(torch.ones(3) + 1e-7)
        assert checks.compare(e, g, 1e-6, 0) is None

    @pytest.mark.parametrize("got, words", [
        (torch.ones(4), "shape"),
        (torch.ones(3, dtype=torch.float64), "dtype"),
        (torch.tensor([1.0, 1.0, 1.1]), "off by"),
        (torch.tensor([1.0, float("nan"), 1.0]), "NaN"),
        (np.ones(3, dtype=np.float32), "torch tensor"),
        ((torch.ones(3),), "should be a tensor"),
    ])
    def test_mismatch_is_explained(self, got, words):
        assert words in checks.compare(to_plain(torch.ones(3)), to_plain(got), 1e-6, 1e-6)

    def test_tuple_length_mismatch(self):
        reason = checks.compare(to_plain((torch.ones(1), torch.ones(1))), to_plain((torch.ones(1),)), 0, 0)
        assert "2 values" in reason

    def test_float_result(self):
        assert checks.compare(2.0, 2.0 + 1e-9, 1e-6, 0) is None
        assert "off by" in checks.compare(2.0, 2.1, 1e-6, 0)
        assert "number" in checks.compare(2.0, "2.0", 1e-6, 0)


class TestRunLocal:
    def test_reference_passes(self):
        run_local(close(), add)

    def test_wrong_function_fails_with_case_label(self):
        with pytest.raises(CheckFailed, match="pair 0"):
            run_local(close(), lambda a, b: a - b)

    def test_exception_in_student_code_fails(self):
        def stub(a, b):
            raise NotImplementedError()

        with pytest.raises(CheckFailed, match="NotImplementedError"):
            run_local(close(), stub)

    def test_modifying_inputs_fails_even_with_right_answer(self):
        def in_place(a, b):
            return a.add_(b)

        with pytest.raises(CheckFailed, match="modified its inputs"):
            run_local(close(), in_place)

    def test_structure_must_match(self):
        check = Check(kind="close", target="f", cases=f"{HERE}:pair_cases", reference=f"{HERE}:add_and_norm")
        run_local(check, add_and_norm)
        with pytest.raises(CheckFailed, match="tuple of 2"):
            run_local(check, add)

    def test_banned_function_fails_even_with_right_values(self):
        check = Check(kind="close", target="softmax", cases=f"{HERE}:softmax_cases",
                      reference=f"{HERE}:softmax_last", banned=("torch.softmax", "aten._softmax"))
        with pytest.raises(CheckFailed, match="must not call"):
            run_local(check, lambda x: F.softmax(x, dim=-1))

    def test_banned_aten_op_is_seen_through_any_python_path(self):
        check = Check(kind="close", target="softmax", cases=f"{HERE}:softmax_cases",
                      reference=f"{HERE}:softmax_last", banned=("aten._softmax",))
        with pytest.raises(CheckFailed, match="aten._softmax"):
            run_local(check, lambda x: x.softmax(-1))
        run_local(check, lambda x: x.exp() / x.exp().sum(-1, keepdim=True))

    def test_module_gets_reference_weights(self):
        check = Check(kind="module", target="Lin", cases=f"{HERE}:linear_cases", reference="torch.nn.Linear")
        run_local(check, torch.nn.Linear)

        class Transposed(torch.nn.Linear):
            def forward(self, x):
                return x @ self.weight.T.T.T + self.bias * 2

        with pytest.raises(CheckFailed, match="wrong"):
            run_local(check, Transposed)

    def test_module_with_wrong_parameter_names_fails_clearly(self):
        class Renamed(torch.nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.proj = torch.nn.Linear(d_in, d_out)

            def forward(self, x):
                return self.proj(x)

        check = Check(kind="module", target="Lin", cases=f"{HERE}:linear_cases", reference="torch.nn.Linear")
        with pytest.raises(CheckFailed, match="parameters do not match"):
            run_local(check, Renamed)

    def test_expected_exception_must_be_raised(self):
        check = Check(kind="close", target="f", cases=f"{HERE}:sqrt_cases", reference=f"{HERE}:positive_sqrt")
        run_local(check, positive_sqrt)
        with pytest.raises(CheckFailed, match="should raise ValueError.*returned normally"):
            run_local(check, torch.sqrt)

        def wrong_error(x):
            if (x < 0).any():
                raise TypeError("nope")
            return x.sqrt()

        with pytest.raises(CheckFailed, match="should raise ValueError.*TypeError"):
            run_local(check, wrong_error)

    def test_module_check_leaves_the_global_random_stream_alone(self):
        check = Check(kind="module", target="Lin", cases=f"{HERE}:linear_cases", reference="torch.nn.Linear")
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        run_local(check, torch.nn.Linear)
        assert torch.equal(torch.rand(3), expected)

    def test_a_judge_broken_by_a_malformed_output_fails_the_check(self):
        check = Check(kind="property", target="f", cases=f"{HERE}:softmax_cases", judge=f"{HERE}:shape_judge")
        run_local(check, lambda x: x * 2)
        with pytest.raises(CheckFailed, match="could not use"):
            run_local(check, lambda x: x[:1])

    def test_property_judge(self):
        check = Check(kind="property", target="softmax", cases=f"{HERE}:softmax_cases",
                      judge=f"{HERE}:rows_sum_to_one")
        run_local(check, lambda x: torch.softmax(x, -1))
        with pytest.raises(CheckFailed, match="rows must sum to one"):
            run_local(check, lambda x: torch.softmax(x, 0))

    def test_check_function_finds_the_target_in_the_callers_namespace(self):
        namespace = {"f": add}
        exec(f"from grader.checks import check_close\n"
             f"check_close('f', reference='{HERE}:add', cases='{HERE}:pair_cases', seed=3)", namespace)
        namespace["f"] = lambda a, b: a * b
        with pytest.raises(CheckFailed):
            exec(f"from grader.checks import check_close\n"
                 f"check_close('f', reference='{HERE}:add', cases='{HERE}:pair_cases')", namespace)

    def test_undefined_target_says_so(self):
        with pytest.raises(CheckFailed, match="not defined"):
            exec(f"from grader.checks import check_close\n"
                 f"check_close('g', reference='{HERE}:add', cases='{HERE}:pair_cases')", {})


class TestParseChecks:
    def test_reads_literal_checks(self):
        src = (f"from grader.checks import check_close, check_property\n"
               f"check_close('f', '{HERE}:add', '{HERE}:pair_cases', seed=2, atol=1e-4, n=5)\n"
               f"check_property('f', judge='{HERE}:rows_sum_to_one', cases='{HERE}:softmax_cases')\n")
        first, second = parse_checks(src)
        assert first == Check(kind="close", target="f", cases=f"{HERE}:pair_cases", reference=f"{HERE}:add",
                              seed=2, atol=1e-4, params=(("n", 5),))
        assert second.kind == "property" and second.judge == f"{HERE}:rows_sum_to_one"
        run_local(first, add)

    @pytest.mark.parametrize("src", [
        "import os\n",
        "x = 1\n",
        "from grader.checks import check_close as cc\n",
        "check_close('f', reference=REF, cases='m:c')\n",
        "check_close('f', reference='m:r', cases='m:' + 'c')\n",
        "check_close('f', reference='m:r', cases='m:c', **extra)\n",
        "assert True\n",
        "print(open('/etc/passwd').read())\n",
        "check_close('f', cases='m:c')\n",
    ])
    def test_anything_else_is_refused(self, src):
        with pytest.raises(NotDeclarative):
            parse_checks(src)


# --- gradient cases, method calls and memory bounds ---------------------------------------------------


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class SquareWrongBackward(Square):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x * grad


class SquareDetached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, grad):
        return None


def square_grad_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, dtype=torch.float64, generator=g)
    return [Case(args=(x,), method="apply", grad_output=torch.randn(3, 4, dtype=torch.float64, generator=g),
                 label="square")]


def test_gradient_cases_compare_outputs_and_input_gradients():
    check = Check("close", "Square", f"{__name__}:square_grad_cases", reference=f"{__name__}:Square",
                  atol=1e-10, rtol=1e-10)
    run_local(check, Square)
    with pytest.raises(CheckFailed, match=r"output\[1\]\[0\] is off"):
        run_local(check, SquareWrongBackward)
    with pytest.raises(CheckFailed, match="should be a tensor"):
        run_local(check, SquareDetached)


def test_gradient_case_of_an_output_without_autograd_history_fails_clearly():
    check = Check("close", "f", f"{__name__}:square_grad_cases", reference=f"{__name__}:Square")

    class NoGraph:
        @staticmethod
        def apply(x):
            return (x * x).detach()

    with pytest.raises(CheckFailed, match="no grad_fn"):
        run_local(check, NoGraph)


def blockwise_rowsum(a, b, block=8):
    return torch.cat([(a[i:i + block] @ b.T).sum(-1) for i in range(0, a.shape[0], block)])


def full_rowsum(a, b):
    return (a @ b.T).sum(-1)


def numpy_rowsum(a, b):
    return torch.from_numpy((a.numpy() @ b.numpy().T).sum(-1))


def rowsum_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(512, 16, generator=g), torch.randn(512, 16, generator=g)
    return [Case(args=(a, b), max_numel=8 * 512, label="512 x 512")]


@pytest.mark.parametrize("fn", [full_rowsum, numpy_rowsum])
def test_memory_bound_catches_the_whole_matrix_in_torch_or_numpy(fn):
    check = Check("close", "f", f"{__name__}:rowsum_cases", reference=f"{__name__}:blockwise_rowsum", atol=1e-4)
    run_local(check, blockwise_rowsum)
    with pytest.raises(CheckFailed, match="elements|outside torch"):
        run_local(check, fn)


def kept_blocks_rowsum(a, b, block=8):
    blocks = [a[i:i + block] @ b.T for i in range(0, a.shape[0], block)]  # every block kept alive
    return torch.cat([s.sum(-1) for s in blocks])


def rowsum_live_cases(seed: int) -> list[Case]:
    (case,) = rowsum_cases(seed)
    case.max_live = 4 * 8 * 512
    return [case]


def test_memory_bound_on_live_elements_catches_every_block_kept_alive():
    check = Check("close", "f", f"{__name__}:rowsum_live_cases", reference=f"{__name__}:blockwise_rowsum",
                  atol=1e-4)
    run_local(check, blockwise_rowsum)
    with pytest.raises(CheckFailed, match="alive at once"):
        run_local(check, kept_blocks_rowsum)


def test_to_plain_bounds_integers_strings_and_containers():
    with pytest.raises(TypeError, match="bits"):
        checks.to_plain(10 ** 400)
    with pytest.raises(TypeError, match="characters"):
        checks.to_plain("x" * (checks.MAX_STR + 1))
    with pytest.raises(TypeError, match="items"):
        checks.to_plain(list(range(checks.MAX_ITEMS + 1)))
    assert checks.to_plain(2 ** 63) == 2 ** 63


def test_evaluate_contains_base_exceptions_and_misbehaving_messages():
    class Nasty(Exception):
        def __str__(self):
            raise SystemExit(1)

    def exits(x):
        raise SystemExit(0)

    def nasty(x):
        raise Nasty()

    case = checks.Case(args=(1,))
    (out,) = checks.evaluate(exits, [case])
    assert out.error.startswith("SystemExit") and "BaseException" in out.error_types
    (out,) = checks.evaluate(nasty, [case])
    assert out.error.startswith("Nasty") and "could not be read" in out.error


def test_banning_a_family_head_bans_the_family():
    names = checks.banned_family(["torch.softmax"])
    assert "torch.log_softmax" in names and "aten._log_softmax" in names
    assert checks.banned_family(["aten._safe_softmax"]) == ["aten._safe_softmax"]  # not a head: itself only
    (out,) = checks.evaluate(lambda x: torch.log_softmax(x, -1).exp(), [checks.Case(args=(torch.randn(3),))],
                             ["torch.softmax"])
    assert out.banned_calls


def test_the_softmax_family_covers_its_masked_sparse_and_fused_attention_kernels():
    """Issue 27, class 5: a softmax computed by fused attention with identity keys and values, by the
    sparse softmax or by the masked one is the banned family too."""
    x = torch.randn(4, 4, dtype=torch.float64)

    def via_attention(x):
        eye = torch.eye(x.shape[-1], dtype=x.dtype)[None]
        return F.scaled_dot_product_attention(x[None] * x.shape[-1] ** 0.5, eye, eye)[0]

    def via_sparse(x):
        return torch.sparse.softmax(x.to_sparse(), -1).to_dense()

    def via_masked(x):
        return torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), -1, 0)

    for fn in (via_attention, via_sparse, via_masked):
        assert torch.allclose(fn(x), torch.softmax(x, -1)), fn.__name__  # each is a softmax
        (out,) = checks.evaluate(fn, [checks.Case(args=(x,))], ["torch.softmax"])
        assert out.banned_calls, fn.__name__


def test_a_banned_operator_on_another_thread_is_recorded_and_gradients_still_flow():
    import threading

    def threaded(x):
        box = []
        worker = threading.Thread(target=lambda: box.append(torch.softmax(x, -1)))
        worker.start()
        worker.join()
        return box[0]

    (out,) = checks.evaluate(threaded, [checks.Case(args=(torch.randn(3),))], ["aten._softmax"])
    assert out.banned_calls == ("aten._softmax",)
    x = torch.randn(3, requires_grad=True)
    torch.softmax(x, -1)[0].backward()  # the process-wide kernel sits below autograd
    assert x.grad is not None and abs(float(x.grad.sum())) < 1e-6
    (out,) = checks.evaluate(lambda x: torch.softmax(x, -1), [checks.Case(args=(torch.randn(3),))], [])
    assert out.banned_calls == ()  # nothing is recorded outside a window that bans it


def test_a_banned_operator_under_inference_mode_on_another_thread_is_refused_and_restored_after():
    import threading

    def sneaky(x):
        box = []

        def work():
            try:
                with torch.inference_mode():
                    box.append(torch.softmax(x.clone(), -1).clone())
            except RuntimeError as exc:  # the refusal: a student who catches it is still recorded
                box.append(torch.exp(x) / torch.exp(x).sum(-1, keepdim=True))
                box.append(str(exc))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return box[0]

    (out,) = checks.evaluate(sneaky, [checks.Case(args=(torch.randn(3),))], ["torch.softmax"])
    assert "aten._softmax" in out.banned_calls
    with torch.inference_mode():
        assert torch.allclose(torch.softmax(torch.zeros(2), -1), torch.full((2,), 0.5))  # the kernel is back


def long_rowsum_cases(seed: int) -> list[Case]:
    """A (4096, 4096) float32 matrix is 64 MiB: past the resident-memory allowance once softmax-like
    temporaries double it, while blocks of 64 rows stay far below."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(4096, 8, generator=g), torch.randn(4096, 8, generator=g)
    return [Case(args=(a, b), max_numel=64 * 4096, max_live=4 * 64 * 4096, label="4096 x 4096")]


def threaded_full_rowsum(a, b):
    import threading

    box = []
    worker = threading.Thread(target=lambda: box.append((a @ b.T).exp().sum(-1)))
    worker.start()
    worker.join()
    return box[0].log()


def mmap_full_rowsum(a, b):
    import mmap

    n, m = a.shape[0], b.shape[0]
    buf = mmap.mmap(-1, n * m * 8)
    scores = np.frombuffer(buf, dtype=np.float64).reshape(n, m)
    for i in range(0, n, 64):  # every block through torch, stored in memory no meter of torch sees
        scores[i:i + 64] = (a[i:i + 64] @ b.T).double().numpy()
    view = torch.from_numpy(scores)  # the whole matrix, read back through torch a block at a time
    out = torch.cat([view[i:i + 64].exp().sum(-1).log() for i in range(0, n, 64)]).float()
    del view, scores
    buf.close()
    return out


def mmap_numpy_rowsum(a, b):
    """The same matrix in anonymous mmap, reduced in numpy a block at a time: torch never sees it whole."""
    import mmap

    n, m = a.shape[0], b.shape[0]
    buf = mmap.mmap(-1, n * m * 8)
    scores = np.frombuffer(buf, dtype=np.float64).reshape(n, m)
    for i in range(0, n, 64):
        scores[i:i + 64] = (a[i:i + 64] @ b.T).double().numpy()
    out = torch.from_numpy(np.concatenate([np.log(np.exp(scores[i:i + 64]).sum(-1)) for i in range(0, n, 64)]))
    del scores
    buf.close()
    return out.float()


def resized_full_rowsum(a, b):
    """The whole matrix in a tensor that starts empty and is grown (``resize_``), written with ``out=``."""
    buf = torch.empty(0, dtype=a.dtype)
    buf.resize_(a.shape[0], b.shape[0])
    torch.matmul(a, b.T, out=buf)
    return buf.exp_().sum(-1).log()


_PREALLOCATED = torch.empty(4096, 4096)  # made before any case runs


def preallocated_full_rowsum(a, b):
    """The whole matrix written into a buffer made before the call (here: when the module was imported)."""
    torch.matmul(a, b.T, out=_PREALLOCATED[:a.shape[0], :b.shape[0]])
    return torch.logsumexp(_PREALLOCATED[:a.shape[0], :b.shape[0]], -1)


def blockwise_logsumexp(a, b, block=64):
    return torch.cat([(a[i:i + block] @ b.T).exp().sum(-1).log() for i in range(0, a.shape[0], block)])


def test_a_memory_bounded_case_may_not_start_threads_and_threads_work_again_after():
    import concurrent.futures
    import threading

    def pooled(a, b):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            return pool.submit(blockwise_logsumexp, a, b).result()

    check = Check("close", "f", f"{__name__}:rowsum_cases", reference=f"{__name__}:blockwise_rowsum", atol=1e-4)
    for fn in (threaded_full_rowsum, pooled):
        with pytest.raises(CheckFailed, match="may not start threads"):
            run_local(check, fn)
    box = []
    worker = threading.Thread(target=lambda: box.append(1))
    worker.start()
    worker.join()
    assert box == [1]


@pytest.mark.skipif(checks._reset_peak_rss() < 0, reason="this kernel offers no peak-RSS reset")
@pytest.mark.parametrize("fn", [mmap_numpy_rowsum])
def test_resident_memory_catches_a_matrix_built_in_mmap(fn):
    check = Check("close", "f", f"{__name__}:long_rowsum_cases", reference=f"{__name__}:blockwise_logsumexp",
                  atol=1e-3, rtol=1e-4)
    run_local(check, blockwise_logsumexp)
    with pytest.raises(CheckFailed, match="grew the process's memory"):
        run_local(check, fn)


@pytest.mark.parametrize("fn", [mmap_full_rowsum, resized_full_rowsum, preallocated_full_rowsum])
def test_the_operator_meter_counts_memory_it_did_not_allocate(fn):
    """A storage an operator writes counts whoever made it: mapped memory wrapped as a tensor
    (``from_numpy``), a tensor grown by ``resize_`` and written by ``matmul(out=)``, a buffer made before
    the call; only the case's own inputs, at their size, are not the call's."""
    check = Check("close", "f", f"{__name__}:long_rowsum_cases", reference=f"{__name__}:blockwise_logsumexp",
                  atol=1e-3, rtol=1e-4)
    with pytest.raises(CheckFailed, match="created a tensor of 16,777,216 elements"):
        run_local(check, fn)


def test_a_memory_bound_that_could_not_be_measured_fails_the_case(monkeypatch):
    """Fail closed: where the peak-resident-memory reset is refused (as it was in the sandbox after the uid
    drop), a memory-bounded case is not passed, whatever the operator meter and tracemalloc saw."""
    check = Check("close", "f", f"{__name__}:long_rowsum_cases", reference=f"{__name__}:blockwise_logsumexp",
                  atol=1e-3, rtol=1e-4)
    monkeypatch.setattr(checks, "_reset_peak_rss", lambda: -1)
    with pytest.raises(CheckFailed, match="could not have its memory measured"):
        run_local(check, blockwise_logsumexp)



# ---------------------------------------------------------------------------------------------------
# issue 30: the meta device, a target called twice, a module in another dtype


def ones_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def mask_cases(seed: int) -> list[Case]:
    return [Case(args=(4,), kwargs={"device": "meta"}, label="meta"),
            Case(args=(3,), again=(), label="twice")]


def test_a_result_on_the_meta_device_is_its_shape_and_dtype_and_a_cpu_result_fails_it():
    plain = to_plain(torch.empty(2, 3, dtype=torch.float16, device="meta"))
    assert plain.kind == "meta" and plain.dtype == "float16" and plain.value.tolist() == [2, 3]
    check = Check("close", "mask", f"{__name__}:mask_cases", reference=f"{__name__}:ones_mask")
    run_local(check, ones_mask)
    run_local(check, lambda T, device=None: torch.ones(T, T, dtype=torch.bool).tril().to(device))  # moved: on it
    with pytest.raises(CheckFailed, match="device it was asked for .*got one on the CPU") as info:
        run_local(check, lambda T, device=None: torch.ones(T, T, dtype=torch.bool).tril())
    assert info.value.case == "meta"
    with pytest.raises(CheckFailed, match="has shape"):
        run_local(check, lambda T, device=None: torch.ones(T, T + 1, dtype=torch.bool, device=device))
    from_plain = checks.from_plain(plain)
    assert from_plain.device.type == "meta" and from_plain.shape == (2, 3)


def test_a_meta_result_and_a_meta_input_cross_the_wire(tmp_path):
    from grader.grading import wire

    wire.write(tmp_path, [checks.Outcome(output=to_plain(torch.empty(5, 1, device="meta")))])
    (back,) = wire.read(tmp_path)
    assert back.output.kind == "meta" and back.output.value.tolist() == [5, 1]
    wire.write(tmp_path / "in", [Case(args=(torch.empty(3, 2, dtype=torch.int32, device="meta"),))])
    (case,) = wire.read(tmp_path / "in")
    assert case.args[0].device.type == "meta" and case.args[0].shape == (3, 2) and case.args[0].dtype == torch.int32


def test_a_case_called_twice_overwrites_the_first_result_so_a_cache_shows():
    import functools

    check = Check("close", "mask", f"{__name__}:mask_cases", reference=f"{__name__}:ones_mask")
    cached = functools.lru_cache(maxsize=None)(ones_mask)
    with pytest.raises(CheckFailed, match=r"output\[1\] differs") as info:
        run_local(check, cached)
    assert info.value.case == "twice"
    table = torch.ones(64, 64, dtype=torch.bool).tril()  # a slice of a shared buffer: the caller's writes reach it
    with pytest.raises(CheckFailed, match="twice"):
        run_local(check, lambda T, device=None: table[:T, :T] if device is None else ones_mask(T, device))
    # a float result is overwritten with NaN, an integer one plus one: the same tensor handed out twice shows
    for value in (torch.arange(3.0), torch.arange(3)):
        spoiled = value.clone()
        checks._spoil([spoiled])
        assert not torch.equal(spoiled, value)


class Stash(torch.autograd.Function):
    """x * y with what backward needs kept on ctx."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


class StashOnTheClass(torch.autograd.Function):
    """The same, with what backward needs kept on the class: the last apply wins."""

    @staticmethod
    def forward(ctx, x, y):
        StashOnTheClass.saved = (x.detach(), y.detach())
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = StashOnTheClass.saved
        return grad * y, grad * x


def stash_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def r():
        return torch.randn(2, 3, dtype=torch.float64, generator=g)

    return [Case(args=(r(), r()), method="apply", grad_output=r(), again=(r(), r()), label="two applies")]


def test_two_applies_before_one_backward_catch_state_kept_outside_ctx():
    check = Check("close", "Stash", f"{__name__}:stash_cases", reference=f"{__name__}:Stash", atol=1e-12, rtol=0)
    run_local(check, Stash)
    with pytest.raises(CheckFailed, match=r"output\[0\]\[1\]\[0\] is off"):
        run_local(check, StashOnTheClass)
    (case,) = stash_cases(0)
    assert checks.stub(case).again is None  # a metered case's plan holds no inputs, the second call's neither


class Scale(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        return x * self.w


class ScaleInFloat32(Scale):
    def forward(self, x):
        return x.float() * self.w.float()


def scale_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [Case(init=(3,), args=(torch.randn(2, 3, dtype=torch.float64, generator=g),), module_dtype="float64",
                 label="float64 module"),
            Case(init=(3,), args=(torch.randn(2, 3, generator=g),), again=(torch.randn(2, 3, generator=g),),
                 label="one module, two inputs")]


def test_a_module_case_converts_the_module_and_calls_one_instance_twice():
    check = Check("module", "Scale", f"{__name__}:scale_cases", reference=f"{__name__}:Scale")
    run_local(check, Scale)
    with pytest.raises(CheckFailed, match="dtype float32, expected float64"):
        run_local(check, ScaleInFloat32)

    class KeepsTheFirst(Scale):
        def forward(self, x):
            if not hasattr(self, "first"):
                self.first = x * self.w
            return self.first

    with pytest.raises(CheckFailed, match="one module, two inputs"):
        run_local(check, KeepsTheFirst)


def first_row(x):
    return x[0].clone()


def row_cases(seed: int) -> list[Case]:
    return [Case(args=(torch.arange(6.0).reshape(2, 3),), fresh=True, label="fresh")]


def test_a_fresh_case_catches_a_result_that_shares_the_callers_memory_and_leaves_the_inputs_as_they_were():
    check = Check("close", "first_row", f"{__name__}:row_cases", reference=f"{__name__}:first_row")
    run_local(check, first_row)
    with pytest.raises(CheckFailed, match="contains NaN") as info:
        run_local(check, lambda x: x[0])  # a view of the input: the caller's later writes reach it
    assert info.value.case == "fresh"
    (case,) = row_cases(0)
    (outcome,) = checks.evaluate(lambda x: x[0], [case])
    assert np.array_equal(outcome.inputs_after[0][0].value, np.arange(6.0).reshape(2, 3))  # put back after reading


def count_cases(seed: int) -> list[Case]:
    return [Case(args=(3, 4), label="product")]


def product(a, b):
    return a * b


def test_a_numpy_integer_is_not_the_python_int_the_reference_returns():
    plain = to_plain(np.int64(12))
    assert plain.kind == "numpy" and plain.dtype == "int64" and plain.value.shape == ()
    check = Check("close", "product", f"{__name__}:count_cases", reference=f"{__name__}:product")
    run_local(check, product)
    with pytest.raises(CheckFailed, match="numpy int64 .* expected a Python int"):
        run_local(check, lambda a, b: np.prod([a, b]))
    # where the reference itself returns a numpy integer, a Python int of the same value is right too
    assert checks.compare(to_plain(np.int32(12)), 12, 0, 0) is None
    assert checks.compare(to_plain(np.int32(12)), 13, 0, 0) is not None
    assert type(checks.from_plain(plain)) is np.int64


def grad_free_cases(seed: int) -> list[Case]:
    return [Case(args=(torch.arange(1.0, 4.0),), requires_grad=True, label="from a forward pass")]


def test_a_requires_grad_case_hands_over_inputs_that_refuse_numpy_and_writes():
    check = Check("close", "double", f"{__name__}:grad_free_cases", reference=f"{__name__}:doubled")
    run_local(check, doubled)
    with pytest.raises(CheckFailed, match="numpy"):
        run_local(check, lambda x: torch.from_numpy(x.numpy() * 2))
    with pytest.raises(CheckFailed, match="in-place|leaf"):
        run_local(check, lambda x: x.mul_(2))


def doubled(x):
    return x * 2
