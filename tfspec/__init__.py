"""tfspec: a declarative language for Transformer architectures.

    spec = tfspec.load("examples/gpt2_small.tfs", overrides={"layers": 2})
    spec.graph()            # the validated networkx IR
    spec.parameter_count()  # computed from the IR

Pipeline (one module per stage): syntax -> resolve -> graph -> validate -> analysis.
"""

from .api import load, parse
from .errors import Diagnostic, Span, SpecError
from .schema import Spec

__all__ = ["Diagnostic", "Span", "Spec", "SpecError", "load", "parse"]
__version__ = "0.1.0"
