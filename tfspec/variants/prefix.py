"""Prefix-LM mask (UNILM, Dong et al. 2019; T5's "prefix LM"): bidirectional over a prefix, causal after it.

Query i may see key j when j <= i, or when j lies in the prefix (j < prefix
length). So prefix positions see the whole prefix, and later positions see the
prefix and what precedes them. The prefix length of each sequence is a run-time
input, ``model(tokens, prefix_lengths=torch.tensor([3, 5]))``; without it every
prefix is empty and the mask is plain causal. Generation feeds the prompt as the
prefix in one step (``tfspec.decoding.Continuation``), after which every new
token is causal, so a KV cache reproduces recomputation.

    decoder x 12 { attention self heads=12 mask=prefix + padding; ... }
"""

from ..registry import MASKS, Mask, RuntimeInput

PREFIX_LENGTHS = RuntimeInput("prefix_lengths", "how many leading tokens of each sequence form its "
                              "bidirectional prefix (default 0: causal)")


@MASKS.register
class PrefixLM(Mask):
    name = "prefix"
    allowed_in_cross = False
    inputs = (PREFIX_LENGTHS,)
    doc = "prefix-LM: positions in the prefix see the whole prefix; the rest see what precedes them"

    def allowed(self, query_index, key_index, options, inputs):
        causal = key_index[None, :] <= query_index[:, None]
        lengths = inputs.get(PREFIX_LENGTHS.name)
        if lengths is None:
            return causal
        in_prefix = key_index[None, None, :] < lengths.to(key_index.device)[:, None, None]  # (batch, 1, keys)
        return causal[None] | in_prefix

    def reach(self, options):
        return (None, None)  # a prefix position may look ahead to the end of the prefix

    def causal_from(self, options):
        return PREFIX_LENGTHS.name
