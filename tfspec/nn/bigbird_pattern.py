"""BigBird's block pattern (``bigbird.py`` computes over it): which key blocks each query block sees, in numpy.

Torch-free, so ``tfspec check`` and ``tfspec mask`` of a BigBird spec draw and cost the pattern without
importing torch; the runtime turns the same arrays into tensors. The random blocks are drawn exactly as
``torch.randperm`` draws them from ``torch.Generator().manual_seed(s)`` (both are the Mersenne Twister,
seeded alike), which drew them before: a trained checkpoint keeps the pattern it was trained with.
"""

from __future__ import annotations

import numpy as np


def bigbird_sparse(length: int, block: int, random: int) -> bool:
    """Does BigBird attention over ``length`` positions run block-sparse? (Else dense, as Hugging Face's.)"""
    return length > (5 + 2 * random) * block


def bigbird_key_blocks(blocks: int, heads: int, random: int, seed: int) -> np.ndarray:
    """The key blocks each middle query block sees, ``(heads, blocks - 2, 5 + random)`` integers: the first,
    its own and its neighbours, the last, then ``random`` others drawn per head (never one it sees already)
    from a generator seeded by ``seed`` and the number of blocks, so a length always gets the same pattern.

    >>> bigbird_key_blocks(12, heads=1, random=1, seed=0)[0, 4].tolist()  # query block 5: 0, 4-6, 11, drawn
    [0, 4, 5, 6, 11, 3]
    """
    stream = torch_cpu_generator(seed * 1_000_003 + blocks)
    rows = np.empty((heads, max(blocks - 2, 0), 5 + random), dtype=np.int64)
    for h in range(heads):
        for i in range(1, blocks - 1):
            others = [j for j in range(1, blocks - 1) if abs(j - i) > 1]
            drawn = randperm_head(len(others), random, stream)
            rows[h, i - 1] = [0, i - 1, i, i + 1, blocks - 1] + [others[j] for j in drawn]
    return rows


def bigbird_block_table(seen: np.ndarray) -> np.ndarray:
    """Bool ``(heads, blocks, blocks)``: which key blocks each query block sees, given the key blocks ``seen``
    of the middle query blocks (``bigbird_key_blocks``); the first and last query blocks see every key."""
    heads, middle, _ = seen.shape
    blocks = middle + 2
    allowed = np.zeros((heads, blocks, blocks), dtype=bool)
    allowed[:, 0] = allowed[:, -1] = True
    allowed[np.arange(heads)[:, None, None], np.arange(1, blocks - 1)[None, :, None], seen] = True
    return allowed


def bigbird_allowed(seen: np.ndarray, length: int, block: int) -> np.ndarray:
    """Bool ``(heads, length, length)``: which key each query sees (``bigbird_block_table`` position by position)."""
    return bigbird_block_table(seen).repeat(block, 1).repeat(block, 2)[:, :length, :length]


def torch_cpu_generator(seed: int) -> np.random.MT19937:
    """The Mersenne Twister in the state ``torch.Generator().manual_seed(seed)`` starts from: torch seeds it
    with the seed's low 32 bits the way numpy's ``RandomState`` seeds an integer (``init_genrand``)."""
    stream = np.random.MT19937()
    key, position = np.random.RandomState(seed & 0xFFFF_FFFF).get_state()[1:3]
    stream.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": position}}
    return stream


def randperm_head(n: int, count: int, stream: np.random.MT19937) -> list[int]:
    """The first ``count`` entries of ``torch.randperm(n)`` on the CPU, drawn from ``stream``
    (``torch_cpu_generator``) as torch draws them: Fisher-Yates forwards, entry i swapped with entry
    i + (a 32-bit draw modulo n - i), taking n - 1 draws whatever ``count`` is, so the next permutation
    starts where torch's would. Only the swaps up to ``count`` are carried out."""
    if n < 2:
        return list(range(min(n, count)))
    draws = stream.random_raw(n - 1)
    moved: dict[int, int] = {}  # position -> the entry now there, where it is not the position itself
    head = []
    for i in range(min(count, n)):
        if i < n - 1:
            other = i + int(draws[i]) % (n - i)
            moved[i], moved[other] = moved.get(other, other), moved.get(i, i)
        head.append(moved.get(i, i))
    return head
