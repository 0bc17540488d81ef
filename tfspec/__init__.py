"""tfspec: a declarative language for Transformer architectures.

    spec = tfspec.load("examples/gpt2_small.tfs", overrides={"layers": 2})
    spec.graph()            # the validated networkx IR
    spec.parameter_count()  # computed from the IR
    model = tfspec.compile("examples/gpt2_small.tfs")  # a torch.nn.Module

One package per stage: ``front`` (syntax -> resolve -> spec) -> ``ir`` (lower -> validate) -> ``backend``
(compile, emit); ``inspect`` (analysis, diagrams, diff, verify), ``run`` (train, generate), ``interop``
and ``cli``. Importing tfspec does not import torch; ``compile`` does.
"""

from .front.api import load, parse
from .version import __version__  # noqa: F401 (tfspec.__version__)
from .errors import Diagnostic, Span, SpecError, SpecWarning
from .front.schema import Spec


def compile(source, **options):
    """Compile a spec to a ``torch.nn.Module``; see ``tfspec.backend.compiler.compile``."""
    from .backend.compiler import compile as compile_spec

    return compile_spec(source, **options)


def render(spec, path, **options):
    """Draw a spec to ``path`` (.svg/.png/.pdf/.dot); see ``tfspec.inspect.diagram.render``."""
    from .inspect.diagram import render as render_spec

    return render_spec(spec if isinstance(spec, Spec) else load(spec), path, **options)


def emit(source, **options) -> str:
    """The spec as one standalone PyTorch file's source (torch only); see ``tfspec.backend.standalone.emit``."""
    from .backend.standalone import emit as emit_spec

    return emit_spec(source, **options)


def analyse(spec, **options):
    """Parameters, FLOPs, memory and complexity of a spec; see ``tfspec.inspect.analysis.analyse``."""
    from .inspect.analysis import analyse as analyse_spec

    return analyse_spec(spec if isinstance(spec, Spec) else load(spec), **options)


def import_config(config, **options) -> str:
    """The readable spec a Hugging Face configuration describes (a ``config.json``, a model directory, a dict);
    see ``tfspec.interop.families.import_config``."""
    from .interop.families import import_config as import_hf_config

    return import_hf_config(config, **options)


def from_pretrained(directory, **options):
    """The compiled model of a local Hugging Face model directory, with its weights (eval mode); see
    ``tfspec.interop.families.from_pretrained``."""
    from .interop.families import from_pretrained as from_hf_directory

    return from_hf_directory(directory, **options)


__all__ = ["Diagnostic", "Span", "Spec", "SpecError", "SpecWarning", "analyse", "compile", "emit", "from_pretrained",
           "import_config", "load", "parse", "render"]
