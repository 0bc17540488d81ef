"""The suite's one tolerance policy: every numerical comparison goes through ``assert_close`` (or ``close``).

Two correct computations of one function in floating point differ by rounding, and by how much depends on the
machine: ATen picks its kernels by the CPU's instruction set (``ATEN_CPU_CAPABILITY``: default, avx2, avx512),
and they sum in different orders. A sum's rounding error grows with the size of what it sums, so an absolute
bound that holds for logits of scale 1 on one CPU fails for logits of scale 10 on another (a T5's logits read
1.14e-5 against an absolute 1e-5 on an Intel Xeon, and 0.9e-5 on AMD). Outputs are therefore compared relative
to the reference's scale:

    max |ours - reference|  <=  rtol * max(1, max |reference|)

The floor of 1 keeps values near zero (a difference of two outputs, a gradient that nearly vanishes) from being
held to a bound tighter than the arithmetic that made them: they are compared absolutely, at ``rtol``.

``rtol`` is ``FLOAT32`` unless a comparison says otherwise, with its reason beside it: 1e-5 is about 100 units
in the last place of float32 (2^-23 = 1.2e-7), the rounding of a few hundred accumulated products at the sizes
the suite uses, and well under any real mistake (a wrong mask, scale or weight moves outputs by 1e-3 or more).
A comparison of 0 asks for the same bits.

    >>> import torch
    >>> assert_close(torch.tensor([100.0]), torch.tensor([100.0005]))  # 5e-6 of the scale
    >>> close(torch.tensor([0.5]), torch.tensor([0.5001]))             # 1e-4 against a floor of 1
    False
"""

from __future__ import annotations

FLOAT32 = 1e-5  # two float32 computations of one function that sum in different orders
FLOAT64 = 1e-10  # the same in float64 (2^-52 = 2.2e-16 a step)


def _tensors(ours, reference):
    import torch

    ours, reference = torch.as_tensor(ours), torch.as_tensor(reference)
    if ours.shape != reference.shape:
        raise AssertionError(f"shapes differ: {tuple(ours.shape)} against the reference's {tuple(reference.shape)}")
    wide = torch.float64 if torch.float64 in (ours.dtype, reference.dtype) else torch.float32
    return ours.detach().to("cpu", wide), reference.detach().to("cpu", wide)


def relative_error(ours, reference) -> float:
    """``max |ours - reference| / max(1, max |reference|)``: the figure the policy bounds (0 for empty tensors;
    infinite where either holds a NaN or an infinity the other does not hold in the same place)."""
    ours, reference = _tensors(ours, reference)
    if ours.numel() == 0:
        return 0.0
    same = (ours == reference) | (ours.isnan() & reference.isnan())
    if not bool((ours.isfinite() | same).all() and (reference.isfinite() | same).all()):
        return float("inf")
    difference = (ours - reference).where(~same, 0.0).abs().max().item()
    scale = reference.where(reference.isfinite(), 0.0).abs().max().item()
    return difference / max(1.0, scale)


def close(ours, reference, rtol: float = FLOAT32) -> bool:
    """Whether ``ours`` equals ``reference`` within the policy (for asserting that two results differ)."""
    return relative_error(ours, reference) <= rtol


def assert_close(ours, reference, rtol: float = FLOAT32, msg: object = None) -> None:
    """Fail, with the error, its bound and where the largest difference is, unless ``ours`` equals ``reference``
    within ``rtol`` of the reference's scale (floored at 1)."""
    error = relative_error(ours, reference)
    if error <= rtol:
        return
    a, b = _tensors(ours, reference)
    where = tuple(int(i) for i in divmod_index((a - b).abs().nan_to_num(float("inf")).argmax().item(), a.shape))
    detail = (f"{error:.3g} of the reference's scale, over the tolerance {rtol:g} (largest difference at {where}: "
              f"{a[where].item() if a.dim() else a.item():.6g} against {b[where].item() if b.dim() else b.item():.6g})")
    raise AssertionError(f"{msg}: {detail}" if msg is not None else detail)


def divmod_index(flat: int, shape) -> list[int]:
    """The index of element ``flat`` of a tensor of ``shape`` (row-major)."""
    index = []
    for size in reversed(tuple(shape)):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return index[::-1]
