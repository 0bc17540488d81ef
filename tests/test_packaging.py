"""The package's shape: every module ships in the wheel (the grammar as tfspec.grammars), and no module imports
another that imports it back."""

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfspec"


def test_wheel_contains_grammar_and_variants(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("tfspec-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tfspec/grammars/tfspec.lark" in names
    assert "tfspec/variants/layernorm.py" in names
    assert "tfspec/nn/attention.py" in names and "tfspec/interop/families/hf_gpt2.py" in names
    # every module of the source tree, in whatever subpackage: none silently drops out of the wheel
    sources = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "grammars" not in p.parts}
    assert sources - set(names) == set()
    shipped = zipfile.ZipFile(wheel).read("tfspec/grammars/tfspec.lark").decode()
    assert shipped == (ROOT / "grammars" / "tfspec.lark").read_text()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> nx.DiGraph:
    """Module -> module for every import of tfspec by tfspec, at module level or inside a function."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if "grammars" not in p.parts}
    graph = nx.DiGraph()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_module_imports_one_that_imports_it_back():
    graph = imports()
    assert graph.number_of_edges() > 200  # the walk sees the package's imports
    assert ("tfspec.run.checkpoint", "tfspec.backend.compiler") in graph.edges  # and those inside functions too
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


def test_the_stages_are_packages_and_the_front_end_imports_no_later_stage():
    graph = imports()
    for stage in ("front", "ir", "variants", "nn", "backend", "inspect", "run", "interop", "cli"):
        assert (PACKAGE / stage / "__init__.py").is_file(), stage
    later = ("tfspec.backend", "tfspec.inspect", "tfspec.interop", "tfspec.cli", "tfspec.nn")
    front = [(a, b) for a, b in graph.edges if a.startswith("tfspec.front") and b.startswith(later)]
    assert front == []


# the pipeline's order: a stage imports the stages before it, never one after it (the top-level package and
# ``__main__`` wire them together); the shared modules import only each other, and the variants' contracts
# (``registry``, ``variants``) build their runtime parts from ``nn`` and are read by every stage
STAGES = ("front", "ir", "nn", "backend", "inspect", "run", "interop", "lsp", "cli")
SHARED = ("errors", "files", "version", "layout", "media")


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tfspec"


def test_no_stage_imports_a_later_one():
    graph = imports()
    rank = {stage: index for index, stage in enumerate(STAGES)}
    upward = [(a, b) for a, b in graph.edges
              if stage_of(a) in rank and stage_of(b) in rank and rank[stage_of(b)] > rank[stage_of(a)]]
    assert upward == []
    shared = [(a, b) for a, b in graph.edges if stage_of(a) in SHARED and stage_of(b) not in SHARED]
    assert shared == []
    contracts = [(a, b) for a, b in graph.edges if stage_of(a) in ("registry", "variants")
                 and stage_of(b) in STAGES[STAGES.index("backend"):]]
    assert contracts == []
    known = set(STAGES) | set(SHARED) | {"registry", "variants", "grammars", "tfspec", "__main__"}
    assert {stage_of(m) for m in graph.nodes} <= known  # a new package takes its place in the order
