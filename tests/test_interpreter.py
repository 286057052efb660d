"""kernels/interpreter.py: the faster interpreter computes what Triton's own computes, bit for bit.

Each reduction below runs twice in the interpreter, once with the vectorised fold and once with Triton's own
element-by-element fold, on values with NaN, infinities, signed zeros and ties, through the kernels' own combine
(``_top2_combine``) and an order-sensitive one (the first of equal values wins, so a fold out of order shows)."""

import pytest
import torch
import triton
import triton.language as tl

from conftest import ON_GPU
from moe_routing.kernels import INTERPRETED
from moe_routing.kernels._bitonic import _top2_combine
from moe_routing.kernels._plan import _add3

pytestmark = pytest.mark.skipif(ON_GPU or not INTERPRETED, reason="the interpreter runs on CPU tensors only")


@triton.jit
def _first_of_the_largest(value_a, index_a, value_b, index_b):
    """Order-sensitive: among equal values the one already held stays (a right-to-left fold would differ)."""
    take_b = value_b > value_a
    return tl.where(take_b, value_b, value_a), tl.where(take_b, index_b, index_a)


@triton.jit
def _reduce_kernel(x_ptr, best_ptr, second_ptr, index_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr,
                   AXIS: tl.constexpr, KEEP: tl.constexpr):
    offsets = (tl.arange(0, A)[:, None, None] * B + tl.arange(0, B)[None, :, None]) * C + tl.arange(0, C)[None, None, :]
    x = tl.load(x_ptr + offsets)
    y = tl.load(x_ptr + A * B * C + offsets)
    best, second = tl.reduce((tl.maximum(x, y), tl.minimum(x, y)), AXIS, _top2_combine, keep_dims=KEEP)
    value, index = tl.reduce((x, offsets), AXIS, _first_of_the_largest, keep_dims=KEEP)
    out = tl.arange(0, best.numel)
    tl.store(best_ptr + out, tl.reshape(best, [best.numel]))
    tl.store(second_ptr + out, tl.reshape(second, [best.numel]))
    tl.store(index_ptr + out, tl.reshape(index, [best.numel]))


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("keep", [False, True])
def test_vectorised_reduce_gives_the_interpreters_bits(monkeypatch, axis, keep):
    from triton.runtime import interpreter

    shape = (4, 4, 4)
    gen = torch.Generator().manual_seed(axis)
    x = torch.randint(-3, 4, (2 * 64,), generator=gen).float() / 2  # few values: ties everywhere
    x[::11] = float("nan")
    x[5::13] = float("inf")
    x[7::17] = float("-inf")
    x[3::19] = -0.0
    outputs = []
    for fold in ("vectorised", "element by element"):
        if fold != "vectorised":
            monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", interpreter.ReduceOps.generic_reduce.original)
        size = 64 // shape[axis]
        best = torch.full((size,), -7.0)
        second = torch.full((size,), -7.0)
        index = torch.full((size,), -7, dtype=torch.int32)
        _reduce_kernel[(1,)](x, best, second, index, *shape, axis, keep)
        outputs.append((best.view(torch.int32), second.view(torch.int32), index))
    for ours, theirs in zip(*outputs):
        assert torch.equal(ours, theirs)
    assert (outputs[0][2] != -7).all()


def test_installed_only_where_written_for():
    from moe_routing.kernels import interpreter

    assert interpreter.install() == triton.__version__.startswith(interpreter.WRITTEN_FOR)


@triton.jit
def _integer_kernel(a_ptr, b_ptr, sum_ptr, difference_ptr, product_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    a = tl.load(a_ptr + offsets)
    b = tl.load(b_ptr + offsets)
    tl.store(sum_ptr + offsets, a + b)
    tl.store(difference_ptr + offsets, a - b)
    tl.store(product_ptr + offsets, a * b)


def test_integer_arithmetic_without_the_unchecked_overflow_condition(monkeypatch):
    """The interpreter builds no overflow condition for a launch without ``debug`` (Triton's ``device_assert`` drops
    it there): int32 sums, differences and products, wrapping ones included, come out as with the condition built."""
    from triton.language.semantic import TritonSemantic
    from triton.runtime import interpreter

    assert not interpreter.InterpreterOptions().debug
    built = []
    original = TritonSemantic.binary_op_sanitize_overflow_impl.original
    gen = torch.Generator().manual_seed(5)
    a = torch.randint(-2**31, 2**31 - 1, (64,), generator=gen, dtype=torch.int32)
    b = torch.randint(-2**31, 2**31 - 1, (64,), generator=gen, dtype=torch.int32)
    a[:4] = torch.tensor([2**31 - 1, -2**31, 65536, -1], dtype=torch.int32)
    b[:4] = torch.tensor([1, 1, 65536, -2**31], dtype=torch.int32)
    outputs = []
    for condition in ("skipped", "built"):
        if condition == "built":
            def counting(self, lhs, rhs, op):
                built.append(op.__name__)
                return original(self, lhs, rhs, op)
            monkeypatch.setattr(TritonSemantic, "binary_op_sanitize_overflow_impl", counting)
        out = [torch.full((64,), -7, dtype=torch.int32) for _ in range(3)]
        _integer_kernel[(1,)](a, b, *out, 64)
        outputs.append(out)
    assert sorted(set(built)) == ["add", "mul", "sub"]
    expected = [(a.long() + b.long()), (a.long() - b.long()), (a.long() * b.long())]
    for skipped, with_condition, wide in zip(*outputs, expected):
        assert torch.equal(skipped, with_condition)
        assert torch.equal(skipped, torch.from_numpy(wide.numpy().astype("int32")))  # two's-complement wrap


@triton.jit
def _sums_kernel(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr):
    offsets = tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :]
    x = tl.load(x_ptr + offsets)
    flat = tl.load(x_ptr + tl.arange(0, A * B))
    first, second, third = tl.reduce((x, x * 3, offsets), AXIS, _add3, keep_dims=KEEP)
    one, two, three = tl.reduce((flat, -flat, flat ^ 5), 0, _add3)
    out = tl.arange(0, first.numel)
    tl.store(out_ptr + out, tl.reshape(first, [first.numel]))
    tl.store(out_ptr + first.numel + out, tl.reshape(second, [first.numel]))
    tl.store(out_ptr + 2 * first.numel + out, tl.reshape(third, [first.numel]))
    tl.store(out_ptr + 3 * first.numel, one)
    tl.store(out_ptr + 3 * first.numel + 1, two)
    tl.store(out_ptr + 3 * first.numel + 2, three)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keep", [False, True])
def test_sum_combines_as_numpy_sums_give_the_interpreters_bits(monkeypatch, axis, keep):
    """The plan kernel's three sums in one reduction (``_add3``) as numpy sums: the same int32 bits as the
    element-by-element fold, with sums that wrap."""
    from triton.runtime import interpreter

    from moe_routing.kernels.interpreter import SUM_COMBINES

    assert _add3.fn.__name__ in SUM_COMBINES
    gen = torch.Generator().manual_seed(axis)
    x = torch.randint(-2 ** 31, 2 ** 31 - 1, (8 * 64,), generator=gen, dtype=torch.int64).to(torch.int32)
    outputs = []
    for fold in ("numpy sums", "element by element"):
        if fold != "numpy sums":
            monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", interpreter.ReduceOps.generic_reduce.original)
        out = torch.full((3 * (512 // (8, 64)[axis]) + 3,), -7, dtype=torch.int32)
        _sums_kernel[(1,)](x, out, 8, 64, axis, keep)
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    assert outputs[0][-3].item() == int(x.sum()) % 2 ** 32 - (2 ** 32 if int(x.sum()) % 2 ** 32 >= 2 ** 31 else 0)
