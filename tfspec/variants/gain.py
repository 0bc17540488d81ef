"""A learned gain in a norm's place: ``x · g`` with no statistics, ``g`` one weight per channel (LayerScale, Touvron
et al. 2021, "Going deeper with Image Transformers": each residual branch scaled by a small diagonal, ``init=1e-5``)
or one scalar (``scalar=true``: Gemma 4's ``layer_scalar``, the whole stream after each layer). ``trained=false``
holds it with the weights, read from a checkpoint and never trained (Gemma 4's is a buffer)."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class Gain(Norm):
    name = "gain"
    positional = ("init",)
    doc = ("gain(init=1, scalar=false, trained=true): x · g, g a learned weight per channel (LayerScale) or one "
           "scalar, starting at init; trained=false keeps it as read from the weights (Gemma 4's layer_scalar)")
    examples = ({}, {"init": 0.1}, {"scalar": True, "trained": False}, {"init": 2.0, "scalar": True})
    flops_per_element = 1
    module_name = "gain"

    def saved(self, dim, options=None):
        trained = options is None or options.trained
        return (dim, 0) if trained else (0, 0)  # the input, for the gain's own gradient; a frozen one keeps none

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        init: float = Field(1.0, ge=-1e6, le=1e6)
        scalar: bool = False  # one gain for every channel (else one per channel)
        trained: bool = True  # false: held with the weights, left out of training

    def params(self, dim, options):
        return {"weight": Param((1 if options.scalar else dim,), "norm_weight", value=options.init)}

    def module(self, dim, options):
        from ..nn.gain import Gain as GainModule
        return Constructor(GainModule, (1 if options.scalar else dim, options.init, options.trained))
