"""Document mask: packed sequences never attend across document boundaries.

Training packs several documents into one row of a batch; each token carries
the id of its document, a run-time input, ``model(tokens,
document_ids=torch.tensor([[0, 0, 0, 1, 1, 2, ...]]))``. A query sees a key only
when both belong to the same document; combined with ``causal`` each document
is its own causal language model, as if it had a row to itself (with its own
position ids: pass ``position_ids`` restarting at 0 for each document to make
the rows identical, not merely independent). Without ``document_ids`` every
row is one document and the mask allows everything.

    decoder x 12 { attention self heads=12 mask=causal + document; ... }
"""

from ..registry import MASKS, Mask, RuntimeInput

def three_documents(length: int) -> list[int]:
    """Example ids: a quarter, a half and the rest of a row, as three documents."""
    return [0] * (length // 4) + [1] * (length // 2) + [2] * (length - length // 4 - length // 2)


DOCUMENT_IDS = RuntimeInput("document_ids", "the document each token belongs to, for packed sequences "
                            "(default: one document per row)", "position", example=three_documents, documents=True)


def same_document(queries, keys, document_ids=None):
    """Query i sees key j when they belong to the same document (``document_ids``: (batch or 1, length))."""
    if document_ids is None:
        import torch  # here, as a model's forward passes no ids: checking or drawing a spec never loads it

        return torch.ones(queries.shape + keys.shape[-1:], dtype=torch.bool, device=queries.device)
    last = document_ids.shape[1] - 1  # banded attention asks about keys beyond the ends, which it never shows
    return document_ids[:, queries.clip(0, last)][..., :, None] == document_ids[:, keys.clip(0, last)][..., None, :]


@MASKS.register
class Document(Mask):
    name = "document"
    allowed_in_cross = False
    inputs = (DOCUMENT_IDS,)
    doc = "packed sequences: a query sees only keys of its own document (document_ids at run time)"

    rule = staticmethod(same_document)
