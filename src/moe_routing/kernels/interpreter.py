"""Triton's interpreter (``TRITON_INTERPRET=1``, how CI and ``moe-routing check`` run the kernels on a CPU), made
faster where these kernels spend its time, computing exactly what it computed before.

Profiled on the test suite (Triton 3.6), three pieces of the interpreter took most of the time:

* a reduction with a combine function of its own (``tl.reduce(..., _top2_combine)``, the group stage's exact top-2)
  ran the combine once per *element*, on scalars: here it runs once per position along the reduced axis, on the
  whole slice of every other axis at once, in the same order (``acc = x[0]``, then ``acc = combine(acc, x[i])``),
  so every output element sees the same operations on the same values; the plan kernel's three integer sums in one
  reduction (``_add3``, ``SUM_COMBINES``) are numpy sums, exact in any order;
* every call of a ``@triton.jit`` helper re-patched ``triton.language`` (``inspect.getmembers`` over three modules)
  although the kernel's launch had patched it for the whole run: a helper call now patches only modules not yet
  patched during that launch (Triton's own patches of a helper call are never undone, so once is enough);
* the dtype table was rebuilt on every conversion: it is built once;
* every integer add, subtract and multiply of fewer than 64 bits built Triton's overflow condition (both operands
  cast to int64, the operation again, two comparisons) for a ``device_assert`` that drops it unless the launch runs
  with ``debug``: without ``debug`` the condition is not built (with it, exactly as Triton builds and checks it).

``install()`` applies this to the Triton it finds when that Triton is the one it was written against (3.6) and the
interpreter is on; otherwise it changes nothing. tests/test_interpreter.py checks the reduction against the
interpreter's own element-by-element one, bit for bit.
"""

from __future__ import annotations

import numpy as np
import triton

WRITTEN_FOR = "3.6."
_installed = False


def install() -> bool:
    """Speed up this process's Triton interpreter (idempotent). Returns whether it is installed."""
    global _installed
    if _installed:
        return True
    if not triton.__version__.startswith(WRITTEN_FOR):
        return False
    from triton.runtime import interpreter

    needed = ("ReduceOps", "InterpretedFunction", "GridExecutor", "_patch_lang", "_get_np_dtype")
    if not all(hasattr(interpreter, name) for name in needed):
        return False
    _install_reduce(interpreter)
    _install_helper_calls(interpreter)
    _install_dtype_table(interpreter)
    _install_overflow_condition(interpreter)
    _installed = True
    return True


def _install_reduce(interpreter) -> None:
    original = interpreter.ReduceOps.generic_reduce

    def generic_reduce(self, input):
        """The interpreter's left fold along the axis, one combine call per position on the other axes' slice; for
        the combines of ``SUM_COMBINES`` on integers, numpy sums instead."""
        if (self.axis is not None and getattr(self.combine_fn.fn, "__name__", None) in SUM_COMBINES
                and all(np.issubdtype(arg.handle.data.dtype, np.integer) for arg in input)):
            return _sums(self, input)
        if self.axis is None or len(input[0].handle.data.shape) < 2:
            return original(self, input)
        axis = self.axis
        data = [arg.handle.data for arg in input]
        accumulators = [np.take(d, 0, axis=axis) for d in data]
        for position in range(1, data[0].shape[axis]):
            acc = tuple(self.to_tensor(a, arg.dtype) for a, arg in zip(accumulators, input))
            new = tuple(self.to_tensor(np.take(d, position, axis=axis), arg.dtype) for d, arg in zip(data, input))
            result = self.combine_fn.fn(*acc, *new)
            result = result if isinstance(result, tuple) else (result,)
            accumulators = [np.broadcast_to(r.handle.data if hasattr(r, "handle") else np.asarray(r), a.shape)
                            .astype(a.dtype, copy=False) for r, a in zip(result, accumulators)]
        out = []
        for a, arg in zip(accumulators, input):
            if self.keep_dims:
                a = np.expand_dims(a, axis)
            out.append(self.to_tensor(np.ascontiguousarray(a), arg.dtype))
        return out

    generic_reduce.original = original
    interpreter.ReduceOps.generic_reduce = generic_reduce


# combines that add each operand to its own (``_plan._add3``: three sums in one reduction): on integers the
# interpreter reduces them with one numpy sum an operand, in the operand's dtype, so that they wrap as the kernel's
# adds do; integer sums are exact in any order
SUM_COMBINES = frozenset({"_add3"})


def _sums(ops, input) -> list:
    """``ops``' reduction of a ``SUM_COMBINES`` combine: each operand summed along the axis in its own dtype."""
    return [ops.to_tensor(np.sum(arg.handle.data, axis=ops.axis, keepdims=ops.keep_dims, dtype=arg.handle.data.dtype),
                          arg.dtype) for arg in input]


def _install_helper_calls(interpreter) -> None:
    patched: list = []  # the language modules patched while the running launch runs (one set a launch)
    original_grid_call = interpreter.GridExecutor.__call__
    original_patch = interpreter._patch_lang

    def _languages(fn) -> frozenset:
        tl = interpreter.tl
        return frozenset(id(value) for value in fn.__globals__.values() if value is tl or value is tl.core)

    def grid_call(self, *args, **kwargs):
        patched.append(_languages(self.fn))
        try:
            return original_grid_call(self, *args, **kwargs)
        finally:
            patched.pop()

    def helper_call(self, *args, **kwargs):
        languages = _languages(self.fn)
        if not patched or not languages <= patched[-1]:
            original_patch(self.fn)  # (its patches outlive the call: Triton never restores a helper's)
            if patched:
                patched[-1] |= languages
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise interpreter.InterpreterError(repr(error)) from error

    interpreter.GridExecutor.__call__ = grid_call
    interpreter.InterpretedFunction.__call__ = helper_call


def _install_dtype_table(interpreter) -> None:
    tl = interpreter.tl
    original = interpreter._get_np_dtype
    table: dict = {}

    def get_np_dtype(tt_dtype):
        key = (type(tt_dtype), getattr(tt_dtype, "name", None),
               getattr(getattr(tt_dtype, "element_ty", None), "name", None),
               isinstance(getattr(tt_dtype, "element_ty", None), tl.pointer_type))
        found = table.get(key)
        if found is None:
            found = table[key] = original(tt_dtype)
        return found

    interpreter._get_np_dtype = get_np_dtype


def _install_overflow_condition(interpreter) -> None:
    semantic = type(interpreter.interpreter_semantic)
    original = semantic.binary_op_sanitize_overflow_impl

    def binary_op_sanitize_overflow_impl(self, lhs, rhs, binary_op):
        """Triton's overflow condition, built only where its ``device_assert`` keeps it (``debug``) or outside the
        interpreter."""
        if isinstance(self.builder, interpreter.InterpreterBuilder) and not self.builder.options.debug:
            return None
        return original(self, lhs, rhs, binary_op)

    binary_op_sanitize_overflow_impl.original = original
    semantic.binary_op_sanitize_overflow_impl = binary_op_sanitize_overflow_impl
