"""The simulated device raises a device error where CUDA raises one, and runs where CUDA runs.

The reference is CUDA's own answer (``fixtures/mixing_float32.json``, captured on a GPU by
``benchmarks/mixing_table.py --device cuda``; its ``device_name`` says which): PyTorch's op samples with each tensor operand
moved to the host in turn. The whole table is run in float32, and every other op in six more
dtypes, each against CUDA's table in that dtype where one was captured on a GPU
(``fixtures/mixing_<dtype>.json``, by ``benchmarks/gpu_check.py``), else against float32's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import opinfo_mixing
import opinfo_sim
import pytest
import torch
import torch.nn.functional as F

from devinspect.testing.ops import op_declarations

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "mixing_float32.json").read_text())


def test_the_table_agrees_with_cuda(sim):
    agreement = opinfo_mixing.compare(opinfo_mixing.capture(sim), REFERENCE["cases"], REFERENCE.get("unrunnable", ()))
    assert agreement.shared > 1000 and agreement.rate >= 0.995, agreement.differ
    assert agreement.differ == []


META_REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "mixing_meta_float32.json").read_text())


def test_a_meta_operand_beside_the_device_answers_mostly_as_on_cuda(sim):
    # CUDA's table with each operand in turn on meta (captured on an H200): the meta kernel runs
    # there, so mm, gather, embedding and the convolutions run (their result on meta) while the
    # TensorIterator ops and the kernels that compare devices raise. The simulated device runs the
    # same meta kernels beside the host's data, which answer as CUDA's in 985 of 1,056 cases; where
    # PyTorch's Python references let a host tensor pass (logical_and, rsub, the masked reductions)
    # or a host kernel checks what CUDA's does not (index_add, index_copy), they differ.
    assert META_REFERENCE["other"] == "meta"
    agreement = opinfo_mixing.compare(opinfo_mixing.capture(sim, other="meta"), META_REFERENCE["cases"],
                                      META_REFERENCE.get("unrunnable", ()))
    assert agreement.shared > 1000 and agreement.rate >= 0.93, agreement.differ
    weight = torch.randn(10, 4, device="meta")
    assert F.embedding(torch.tensor([1, 2], device=sim), weight).is_meta
    with pytest.raises(RuntimeError, match="Tensor on device meta is not on the expected device sim:0"):
        torch.ones(3, device=sim) + torch.ones(3, device="meta")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.complex64,
                                   torch.bool],
                         ids=str)
def test_the_rules_do_not_depend_on_the_dtype(sim, dtype):
    # Every other op in another dtype answers as CUDA does in that dtype: its own table where one
    # was captured on a GPU, else float32's (the reference's dtype).
    share = {op.name for i, op in enumerate(opinfo_sim.op_db()) if i % 2}
    reference = opinfo_mixing.reference_for(dtype)
    agreement = opinfo_mixing.compare(opinfo_mixing.capture(sim, dtype, share), reference.cases, reference.unrunnable)
    assert agreement.shared > 150 and agreement.differ == [], reference.source


def _table(path: Path, device: str, dtype: str, cases: dict) -> None:
    path.write_text(json.dumps({"device": device, "dtype": dtype, "cases": cases, "unrunnable": ["x#9"]}))


def test_each_dtype_is_held_to_its_own_table_where_one_was_captured(tmp_path):
    _table(tmp_path / "mixing_float32.json", "cuda", "float32",
           {"add.#0#input": "ok", "nn.functional.conv3d.#0#input": "other:NotImplementedError"})
    _table(tmp_path / "mixing_bfloat16.json", "cuda", "bfloat16", {"add.#0#input": "device"})
    own = opinfo_mixing.reference_for(torch.bfloat16, tmp_path)
    assert own.source == "mixing_bfloat16.json" and own.cases == {"add.#0#input": "device"}
    assert own.unrunnable == ("x#9",)
    fallback = opinfo_mixing.reference_for(torch.float16, tmp_path)
    assert fallback.source == "mixing_float32.json" and fallback.cases["add.#0#input"] == "ok"
    assert fallback.cases["nn.functional.conv3d.#0#input"] == "other:NotImplementedError"
    # A complex convolution compares its operands' types first: float32's missing kernel is a device error there.
    assert opinfo_mixing.reference_for(torch.complex64, tmp_path).cases["nn.functional.conv3d.#0#input"] == "device"
    _table(tmp_path / "mixing_int64.json", "sim", "int64", {})
    with pytest.raises(ValueError, match="not CUDA's table in int64"):
        opinfo_mixing.reference_for(torch.int64, tmp_path)


def test_the_reference_is_cudas_table():
    assert REFERENCE["device"] == "cuda" and len(REFERENCE["cases"]) > 1000
    assert set(REFERENCE["cases"].values()) <= {"ok", "device"} | {f"other:{n}" for n in ("RuntimeError", "ValueError",
                                                                                          "TypeError", "IndexError",
                                                                                          "NotImplementedError")}


# -- the rules, as a user meets them ------------------------------------------------------------

def test_an_entry_point_that_checks_devices_refuses_a_host_scalar(sim):
    x = torch.ones(3, device=sim)
    with pytest.raises(RuntimeError, match=r"but got min is on cpu, different from other tensors on sim:0 \(when"):
        torch.clamp_min(x, torch.tensor(0.0))
    with pytest.raises(RuntimeError, match="got index is on sim:0, different from other tensors on cpu"):
        torch.index_select(torch.ones(3), 0, torch.tensor([0], device=sim))
    with pytest.raises(RuntimeError, match="same device"):
        torch.equal(torch.tensor(1.0, device=sim), torch.tensor(1.0))


def test_tensor_iterator_takes_a_host_scalar_it_reads_never_one_it_writes(sim):
    x = torch.arange(3.0, device=sim)
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.tensor([0.0, 2.0, 4.0]))
    assert (torch.tensor(2.0) - x).device == sim  # in either position
    assert torch.where(x > 0, x, torch.tensor(-1.0)).tolist() == [-1.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="same device"):
        torch.tensor(1.0).add_(torch.tensor(1.0, device=sim))  # the host scalar is the output
    with pytest.raises(RuntimeError, match="same device"):
        x * torch.ones(3)  # not a scalar


def test_a_composite_op_puts_its_result_where_its_inner_ops_do(sim):
    # select_scatter has no CUDA kernel: its composite clones the input and copies src into it,
    # so a host input gives a host result on CUDA, and here.
    out = torch.select_scatter(torch.zeros(2, 3), torch.ones(3, device=sim), 0, 1)
    assert out.device.type == "cpu" and out.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    # logical_and makes its result on its first argument's device, which then refuses the other.
    with pytest.raises(RuntimeError, match="same device"):
        torch.logical_and(torch.tensor(True), torch.tensor(True, device=sim))
    assert torch.logical_and(torch.tensor(True, device=sim), torch.tensor(True)).device == sim
    with pytest.raises(RuntimeError, match="same device"):
        F.embedding(torch.tensor(1), torch.ones(4, 2, device=sim))  # index_select checks its entry


def test_kernels_that_refuse_a_host_scalar(sim):
    x = torch.ones(3, device=sim)
    with pytest.raises(RuntimeError, match="same device"):
        F.mse_loss(x.sum(), torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1"):
        torch.addcmul(x, torch.tensor(2.0), x)
    assert torch.addcmul(x, x, torch.tensor(2.0)).tolist() == [3.0, 3.0, 3.0]  # tensor2 is read as a number
    with pytest.raises(RuntimeError, match="expected self and mask to be on the same device, but got mask on cpu"):
        x.masked_fill(torch.tensor([True, False, True]), 0.0)
    assert x.masked_fill(torch.tensor([True, False, True], device=sim), torch.tensor(5.0)).tolist() == [5.0, 1.0, 5.0]


def test_indices_may_stay_on_the_host_values_may_not(sim):
    x = torch.arange(4.0, device=sim)
    assert x[torch.tensor([0, 2])].tolist() == [0.0, 2.0]
    with pytest.raises(RuntimeError, match="indices should be either on cpu or on the same device"):
        torch.arange(4.0)[torch.tensor([0, 2], device=sim)]
    x[torch.tensor([1])] = torch.tensor(7.0)  # a host scalar value
    with pytest.raises(RuntimeError, match="same device"):
        x.index_put_((torch.tensor([1]),), torch.ones(1))


def test_ctc_loss_takes_host_lengths_as_it_does_for_a_gpus_tensors(sim):
    # For plain tensors ctc_loss reads its lengths to the host first; the simulated device's
    # tensors, a subclass, would otherwise take the path that checks the lengths' device.
    torch.manual_seed(0)
    log_probs = torch.randn(6, 2, 5).log_softmax(2).requires_grad_()
    targets, lengths, target_lengths = torch.randint(1, 5, (2, 3)), torch.full((2,), 6), torch.full((2,), 3)
    expected = F.ctc_loss(log_probs, targets, lengths, target_lengths)
    expected.backward()
    on_device = log_probs.detach().to(sim).requires_grad_()
    loss = F.ctc_loss(on_device, targets.to(sim), lengths, target_lengths)
    loss.backward()
    assert loss.device == sim and on_device.grad.device == sim
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(on_device.grad.cpu(), log_probs.grad)
    # Host log-probabilities: the targets follow them to the host, and so does the loss.
    assert F.ctc_loss(log_probs.detach(), targets.to(sim), lengths.to(sim), target_lengths).device.type == "cpu"
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        F.ctc_loss(on_device, targets.to(sim), lengths.float(), target_lengths)


def test_convolution_compares_its_operands_types_as_cuda_does(sim):
    conv = torch.nn.Conv2d(3, 4, 3).to(sim)
    with pytest.raises(RuntimeError, match=r"Input type \(torch.FloatTensor\) and weight type \(torch.sim.FloatTensor\)"):
        conv(torch.ones(1, 3, 5, 5))
    with pytest.raises(RuntimeError, match=r"and bias type \(torch.FloatTensor\) should be the same"):
        F.conv2d(torch.ones(1, 3, 5, 5, device=sim), conv.weight, conv.bias.detach().cpu())


def _conv3d_answer(sim, dtype) -> str:
    weight = torch.ones(2, 1, 1, 1, 1, dtype=dtype, device=sim)
    try:
        F.conv3d(torch.ones(1, 1, 2, 2, 2, dtype=dtype), weight)
    except NotImplementedError as exc:
        assert "'aten::slow_conv3d_forward'" in str(exc)
        return "missing kernel"
    except RuntimeError as exc:
        assert "should be the same" in str(exc)
        return "device"
    return "ran"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_host_inputs_convolution_answers_the_same_whatever_this_processor(sim, dtype, monkeypatch):
    # Which kernel the host takes for a bfloat16 or float16 input depends on its instruction set
    # (oneDNN's, where the processor has those instructions): the answer must not.
    real = torch._C._select_conv_backend

    def with_low_precision_kernels(*args):
        if args[0].dtype in (torch.bfloat16, torch.float16) and torch._C._get_mkldnn_enabled():
            return torch._C._ConvBackend.Mkldnn
        return real(*args)

    def without_low_precision_kernels(*args):
        if args[0].dtype not in (torch.bfloat16, torch.float16):
            return real(*args)
        was = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)
        try:
            return real(*args)
        finally:
            torch._C._set_mkldnn_enabled(was)

    answers = {}
    for processor, choice in (("this one", real), ("with them", with_low_precision_kernels),
                              ("without them", without_low_precision_kernels)):
        monkeypatch.setattr(torch._C, "_select_conv_backend", choice)
        answers[processor] = _conv3d_answer(sim, dtype)
    # As float32's, which an H200 answered with the missing 3-D kernel of the host's choice.
    assert set(answers.values()) == {"missing kernel"}, answers
    assert _conv3d_answer(sim, torch.float32) == "missing kernel"
    assert torch._C._get_mkldnn_enabled() == torch.backends.mkldnn.is_available()  # left as it was


def test_gradients_flow_through_a_call_with_a_host_scalar(sim):
    x = torch.ones(3, device=sim, requires_grad=True)
    (torch.where(x > 0, x * torch.tensor(3.0), torch.tensor(0.0))).sum().backward()
    assert x.grad.device == sim and x.grad.tolist() == [3.0, 3.0, 3.0]


def test_gradients_flow_through_a_composite_run_on_the_device(sim):
    # index_put has no CUDA kernel: its composite runs here with the host indices, under the op's own backward.
    x = torch.ones(4, device=sim, requires_grad=True)
    values = torch.full((2,), 3.0, device=sim, requires_grad=True)
    y = x.index_put((torch.tensor([0, 2]),), values)
    assert type(y.grad_fn).__name__ == "IndexPutBackward0" and y.tolist() == [3.0, 1.0, 3.0, 1.0]
    (y * torch.arange(4.0, device=sim)).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 3.0] and values.grad.tolist() == [0.0, 2.0]


# -- PyTorch's operator declarations ------------------------------------------------------------

def test_the_declarations_reader_reads_what_a_yaml_parser_reads():
    yaml = pytest.importorskip("yaml")
    path = op_declarations._declarations_file()
    assert path is not None
    entries = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    by_name = {e["func"].split("(")[0]: e for e in entries}

    def cuda(entry):
        keys = {k.strip() for ks in (entry.get("dispatch") or {}) for k in ks.split(",")}
        return "CUDA" in keys or "ufunc_inner_loop" in entry

    read = op_declarations.declarations()
    assert len(read) == len(by_name)
    for name, entry in by_name.items():
        delegate = by_name.get(entry.get("structured_delegate", ""))
        iterates = any(e is not None and e.get("structured_inherits") == "TensorIteratorBase" for e in (entry, delegate))
        expected = op_declarations.Declaration(cuda(entry) or (delegate is not None and cuda(delegate)),
                                               entry.get("device_check", "ExactSame") != "NoCheck", iterates)
        assert read[name] == expected, name


def test_declarations_of_known_ops():
    d = op_declarations.declaration
    assert d("aten::add", "Tensor") == op_declarations.Declaration(cuda_kernel=True, checks_devices=False, iterates=True)
    assert not d("aten::mm", "default").iterates and d("aten::eq", "Tensor").iterates
    assert d("aten::index_select", "default").checks_devices
    assert not d("aten::select_scatter", "default").cuda_kernel
    assert d("prims::add", "default") is None and d("aten::no_such_op", "default") is None


def test_the_table_script_writes_a_table_and_compares_it(tmp_path):
    # The interface the GPU check uses: --device, --dtype, --out (with its metadata), --compare.
    script = Path(__file__).parents[1] / "benchmarks" / "mixing_table.py"
    out = tmp_path / "table.json"
    done = subprocess.run([sys.executable, str(script), "--device", "sim", "--ops", "add,clamp_min,select_scatter",
                           "--out", str(out), "--compare", str(Path(__file__).parent / "fixtures" / "mixing_float32.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    table = json.loads(out.read_text())
    assert {"device", "device_name", "torch", "dtype", "other", "python", "date", "cases", "unrunnable"} <= set(table)
    assert table["device"] == "sim" and table["dtype"] == "float32" and table["torch"] == torch.__version__
    assert table["cases"]["clamp_min.#0#input"] == "device" and table["cases"]["add.#1#arg/0"] == "ok"
    assert re.search(r"(\d+)/\1 cases agree \(100\.00%\)", done.stdout), done.stdout
