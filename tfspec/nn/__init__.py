"""Runtime building blocks of a compiled model: small ``nn.Module``s, one idea per file.

``tfspec.backend.compiler`` assembles them from the graph IR; the variants in
``tfspec/variants/`` say which one each spec name builds.
"""
