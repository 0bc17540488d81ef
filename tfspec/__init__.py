"""tfspec: a declarative language for Transformer architectures.

    spec = tfspec.load("examples/gpt2_small.tfs", overrides={"layers": 2})
    spec.graph()            # the validated networkx IR
    spec.parameter_count()  # computed from the IR
    model = tfspec.compile("examples/gpt2_small.tfs")  # a torch.nn.Module

One package per stage: ``front`` (syntax -> resolve -> spec) -> ``ir`` (lower -> validate) -> ``backend``
(compile, emit); ``inspect`` (analysis, diagrams, diff, verify), ``run`` (train, generate), ``interop``
and ``cli``. Importing tfspec does not import torch; ``compile`` does. Nor does it import the front end until
its first use (``tfspec.load``, ``tfspec.Spec``): the command line's start-up, which a Ctrl-C may interrupt, runs
under its own handler.
"""

import importlib

from .version import __version__  # noqa: F401 (tfspec.__version__)

_AT_FIRST_USE = {"load": "ir.api", "parse": "ir.api", "Spec": "front.schema", "Diagnostic": "errors",
                 "Span": "errors", "SpecError": "errors", "SpecWarning": "errors", "TrainConfig": "run.train",
                 "resume": "run.train"}


def __getattr__(name: str):
    """``load``, ``parse``, ``Spec``, the diagnostics' classes, ``TrainConfig`` and ``resume``, imported at their
    first use."""
    if name not in _AT_FIRST_USE:
        raise AttributeError(f"module 'tfspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_AT_FIRST_USE[name]}", __name__), name)
    globals()[name] = value
    return value


def compile(source, **options):
    """Compile a spec to a ``torch.nn.Module``; see ``tfspec.backend.compiler.compile``."""
    from .backend.compiler import compile as compile_spec

    return compile_spec(source, **options)


def render(spec, path, **options):
    """Draw a spec to ``path`` (.svg/.png/.pdf/.dot); see ``tfspec.inspect.diagram.render``."""
    from .inspect.diagram import render as render_spec

    from .front.schema import Model
    from .ir.api import load

    return render_spec(spec if isinstance(spec, Model) else load(spec), path, **options)


def present_spec(spec) -> str:
    """A spec as a notebook shows it (``Spec._repr_html_``, a compiled model's too): its check line, diagram and
    parameters by block, from the report page."""
    from .inspect.report import spec_html

    return spec_html(spec)


def emit(source, **options) -> str:
    """The spec as one standalone PyTorch file's source (torch only); see ``tfspec.backend.standalone.emit``."""
    from .backend.standalone import emit as emit_spec

    return emit_spec(source, **options)


def analyse(spec, **options):
    """Parameters, FLOPs, memory and complexity of a spec; see ``tfspec.inspect.analysis.analyse``."""
    from .inspect.analysis import analyse as analyse_spec

    from .front.schema import Model
    from .ir.api import load

    return analyse_spec(spec if isinstance(spec, Model) else load(spec), **options)


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


def train(spec, config=None, run_dir=None, **options):
    """Train ``spec`` by ``config`` (a ``tfspec.TrainConfig``) into ``run_dir``; ``config.init`` may name a run, a
    checkpoint or a Hugging Face model directory to start from; see ``tfspec.run.train.train``."""
    from .interop.initial import read_initial
    from .run.train import train as train_spec

    if config is not None and config.init and options.get("initial") is None:
        options["initial"] = read_initial(config.init)
    return train_spec(spec, config, run_dir, **options)


def export(source, directory, to: str = "hf") -> str:
    """Write a compiled model, a run directory or a checkpoint for other tools: ``to="hf"`` (a directory
    ``transformers`` loads), ``"onnx"`` (checked by onnxruntime) or ``"torch"`` (a standalone file and its
    weights); see ``tfspec.interop.export``.

    >>> tfspec.export(model, "exported", to="hf")  # doctest: +SKIP
    "a Hugging Face GPT2LMHeadModel (config.json, model.safetensors); ..."
    """
    from .interop.export import export as export_model

    return export_model(source, directory, to=to)


__all__ = ["Diagnostic", "Span", "Spec", "SpecError", "SpecWarning", "TrainConfig", "analyse", "compile", "emit",
           "export", "from_pretrained", "import_config", "load", "parse", "render", "resume", "train"]
