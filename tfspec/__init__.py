"""tfspec: a declarative language for Transformer architectures.

    spec = tfspec.load("examples/gpt2_small.tfs", overrides={"layers": 2})
    spec.graph()            # the validated networkx IR
    spec.parameter_count()  # computed from the IR
    model = tfspec.compile("examples/gpt2_small.tfs")  # a torch.nn.Module

Pipeline (one module per stage): syntax -> resolve -> graph -> validate -> compiler
(-> analysis). Importing tfspec does not import torch; ``compile`` does.
"""

from .api import load, parse
from .errors import Diagnostic, Span, SpecError
from .schema import Spec



def compile(source, **options):
    """Compile a spec to a ``torch.nn.Module``; see ``tfspec.compiler.compile``."""
    from .compiler import compile as compile_spec

    return compile_spec(source, **options)


__all__ = ["Diagnostic", "Span", "Spec", "SpecError", "compile", "load", "parse"]
__version__ = "0.1.0"
