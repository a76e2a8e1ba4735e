"""A compiled program whose large constants are its arguments, not part of the program.

A prepared model's step time closes over its routes, sizes and flow maps (NumPy arrays, 10^5 - 10^6
entries on a large fleet). ``jax.jit`` embeds closed-over arrays in the program as constants, and
XLA then constant-folds whatever depends only on them (per-link byte sums, argmins) at compile
time, in its slow HLO evaluator: seconds of compilation on a 10^5-flow fleet. ``Program`` traces
the function once per argument signature, moves the constants it closes over to the device, and
compiles the trace with those constants as ordinary arguments, so the same work runs at run time
in compiled code. The traces and compiled programs live in the ``Program`` object.
"""

from __future__ import annotations

from collections.abc import Callable

import jax


class Program:
    """``jax.jit(fn)``, with ``fn``'s closed-over arrays passed to the compiled program as arguments."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self._compiled: dict = {}  # argument signature -> (compiled evaluation of the trace, constants)

    def __call__(self, *args):
        leaves, tree = jax.tree.flatten(args)
        key = (tree, tuple(jax.typeof(x) for x in leaves))
        if key not in self._compiled:
            closed, shape = jax.make_jaxpr(self.fn, return_shape=True)(*args)
            out_tree = jax.tree.structure(shape)

            def run(consts, leaves):
                return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, consts, *leaves))

            self._compiled[key] = (jax.jit(run), jax.device_put(list(closed.consts)))
        run, consts = self._compiled[key]
        return run(consts, leaves)
