"""Array type aliases used in signatures and docstrings (shapes are documentation, not checks)."""

from jaxtyping import Array, ArrayLike, Bool, Float, Int

__all__ = ["Array", "ArrayLike", "Bool", "Float", "Int"]
