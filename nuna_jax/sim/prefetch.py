"""A software prefetch hint for the compiled event loop (docs/simulator.md, "Speed").

``prefetch(a, i)`` asks the CPU to bring the cache line of ``a[i]`` (1-D) or of row ``a[i, 0]`` (2-D)
into its caches and returns nothing: LLVM's ``llvm.prefetch`` (read, high locality, data cache),
an x86 ``prefetcht0``.  It is a hint only: it never faults (an index past the array is harmless),
never changes a value and so never changes a result; it can only make a later load of that line
faster.  Without numba (``NUNA_JAX_NO_NUMBA``) it is a Python no-op.
"""

from __future__ import annotations

from ..numba_jit import HAVE_NUMBA

__all__ = ["prefetch"]

if HAVE_NUMBA:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, i):
        """``llvm.prefetch`` of the address of ``arr[i]`` (1-D) or ``arr[i, 0]`` (2-D); no bounds check."""
        if not isinstance(arr, types.Array) or arr.ndim not in (1, 2) or not isinstance(i, types.Integer):
            return None
        sig = types.void(arr, i)

        def codegen(context, builder, signature, args):
            aryty, ity = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            idx = context.cast(builder, args[1], ity, types.intp)
            inds = [idx] if aryty.ndim == 1 else [idx, context.get_constant(types.intp, 0)]
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)
            i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [i8p, i32(0), i32(3), i32(1)])
            return context.get_dummy_value()
        return sig, codegen
else:  # pragma: no cover - exercised only without numba
    def prefetch(arr, i):
        """No-op without numba."""
        return None
