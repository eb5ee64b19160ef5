"""A device error a library wraps or re-raises is explained from the error the failing call raised.

Libraries catch the RuntimeError and raise their own: their own class with the error as its
``__cause__`` (torchmetrics' "Encountered different devices in metric calculation", raised ``from
err``), or new words while handling it (pyro's trace adds the sample sites' shapes; the error is
its ``__context__``). The explanation follows the chain to the call that failed and the traceback
back to the user's line; the fix moves the user's own tensor and runs as printed.
"""

from __future__ import annotations

import pytest
from conftest import run

import devinspect
from devinspect.diagnose.errors.explainer import chained_errors

_LIBRARY = '''import torch


class MetricError(RuntimeError):
    """The library's own error class."""


class Scorer:
    def __init__(self, weight):
        self.weight = weight

    def _update(self, preds):
        return preds @ self.weight

    def score(self, preds):
        return (preds @ self.weight).softmax(-1)

    def update(self, preds):
        try:
            return self._update(preds)
        except RuntimeError as err:
            raise MetricError("Encountered different devices in metric calculation (see stacktrace)") from err


def traced(fn, *args):
    try:
        return fn(*args)
    except (RuntimeError, ValueError) as exc:
        shapes = ", ".join(str(tuple(a.shape)) for a in args)
        raise ValueError(f"Error while computing at site: {exc}\\nshapes: {shapes}")
'''


@pytest.fixture
def wraplib(ip, sim, tmp_path, monkeypatch):
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "wraplib.py").write_text(_LIBRARY)
    monkeypatch.syspath_prepend(str(library))
    run(ip, "import torch, wraplib\nfrom devinspect import testing\ndev = testing.enable()\n"
            "weight = torch.randn(8, 3)\nscorer = wraplib.Scorer(weight.to(dev))\n"
            "preds = torch.randn(4, 8)\nfeatures = torch.randn(4, 8, device=dev)")
    return ip


def test_the_chain_joins_the_inner_traceback_to_the_outer_one():
    def inner():
        raise RuntimeError("inner")

    def outer():
        try:
            inner()
        except RuntimeError as err:
            raise KeyError("outer") from err

    try:
        outer()
    except KeyError as exc:
        chain = chained_errors(exc)
    (first, outer_entries), (cause, entries) = chain
    assert type(first) is KeyError and type(cause) is RuntimeError
    names = [e.frame.f_code.co_name for e in entries]
    # the test's frame, then outer (where the cause was caught, once), then inner
    assert names == ["test_the_chain_joins_the_inner_traceback_to_the_outer_one", "outer", "inner"]
    assert [e.frame.f_code.co_name for e in outer_entries][-1] == "outer"


def test_an_error_raised_from_a_device_error_in_a_library_class_is_explained_at_the_users_line(wraplib):
    ip = wraplib
    result, _, _, _ = run(ip, "score = scorer.update(preds)")
    assert result.error_in_exec is not None and type(result.error_in_exec).__name__ == "MetricError"
    mismatch = devinspect.explain(result.error_in_exec, namespace=ip.user_ns).mismatch
    assert mismatch is not None and set(mismatch.devices) == {"cpu", "sim:0"}
    assert mismatch.cell_line is not None and "scorer.update(preds)" in mismatch.cell_line.text
    assert any(o.name == "preds" for o in mismatch.operands)
    fix = mismatch.fix
    assert fix is not None and "preds" in (fix.code or "") + "".join(e.new for e in fix.edits)
    if fix.code:
        assert run(ip, fix.code)[0].success
    else:
        (edit,) = fix.edits
        assert run(ip, edit.new)[0].success
    assert run(ip, "score = scorer.update(preds)")[0].success


def test_an_error_re_raised_in_a_librarys_own_words_is_explained_in_the_plain_cell_and_under_devcheck(wraplib):
    ip = wraplib
    result, text, _, _ = run(ip, "out = wraplib.traced(scorer.score, preds)")
    assert type(result.error_in_exec) is ValueError and result.error_in_exec.__cause__ is None
    explanation = devinspect.explain(result.error_in_exec, namespace=ip.user_ns)
    assert explanation.mismatch is not None and any(o.name == "preds" for o in explanation.mismatch.operands)
    assert "preds" in text  # the explanation after the plain cell names the user's tensor
    run(ip, "%%devcheck -v report\nout = wraplib.traced(scorer.score, preds)")
    report = ip.user_ns["report"]
    assert report.mismatch is not None and any(o.name == "preds" for o in report.mismatch.operands)
    assert report.mismatch.fix is not None and report.mismatch.fix.code
    assert run(ip, report.mismatch.fix.code)[0].success
    assert run(ip, "out = wraplib.traced(scorer.score, preds)")[0].success
