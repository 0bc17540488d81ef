"""Keys and values from one projection (Gemma 4's global layers, ``attention_k_eq_v``): dot-product attention whose
values are its keys as projected -- before any qk-norm and before positions rotate them -- so the layer has no value
projection (``qkv`` holds the query and key rows only). A step on the fresh values (``value_norm``) then makes them
differ from the keys the scores read.

    layers every(6, from=5) { self_attn kind=same_kv kv_heads=2 head_dim=512 steps=value_norm }
"""

from ..registry import ATTENTION_KINDS, Constructor, Problem, linear_params
from .dot import DotProduct, math_keeps_projection


@ATTENTION_KINDS.register
class SameKeyValue(DotProduct):
    name = "same_kv"
    title = "Shared Key-Value"
    doc = "dot-product attention whose values are its keys' projection: no value projection (Gemma 4)"

    def params(self, shape, options):
        queries = dict(query_rows=shape.q_width, head_dim=shape.head_dim)
        return {**linear_params("qkv", shape.q_width + shape.kv_width, shape.width, shape.bias, **queries),
                **linear_params("out", shape.width, shape.q_width, shape.out_bias, residual=True)}

    def check(self, options, shape):
        problems = super().check(options, shape)
        if shape.bias and not shape.key_bias:
            problems.append(Problem("its values are its keys, one projection: keys without a bias would be values "
                                    "without one", "drop key_bias=false"))
        if shape.cross:
            problems.append(Problem("keys and values from one projection are of the queries' own sequence; "
                                    "cross-attention projects the memory", "use kind=dot on the cross-attention"))
        return problems

    def projection_flops(self, shape, options, queries, keys):
        q_width, kv_width = shape.q_width, shape.kv_width
        matmul = 2 * queries * shape.width * q_width + 2 * keys * shape.width * kv_width \
            + 2 * queries * q_width * shape.width
        bias = (queries * q_width + keys * kv_width if shape.bias else 0) \
            + (queries * shape.width if shape.out_bias else 0)
        return matmul, bias

    def value_rows(self, shape, options):
        return 0

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        elements, words = super().core_saved(shape, options, batch, queries, keys, dropout, fused)
        if not fused and math_keeps_projection(shape, batch):  # (kept whole: it has no value rows)
            elements -= batch * keys * shape.kv_width
        return elements, words

    def recomputed_saved(self, shape, options, batch, length, remade):
        # the values are the keys' rows of the projection: one tensor with the keys where nothing remade them, and
        # otherwise the rows that keep the projection whole beside the queries'
        return super().recomputed_saved(shape, options, batch, length, remade) - batch * length * shape.kv_width

    def build(self, config, options, layer=None):
        from ..nn.attention import SameKeyValueAttention
        return SameKeyValueAttention(config, layer)

    def core(self, config, options):
        from ..nn.attention import SameKeyValueCore, core_arguments
        return Constructor(SameKeyValueCore, kwargs=core_arguments(config))
