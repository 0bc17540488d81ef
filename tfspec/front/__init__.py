"""The front end: spec text -> a resolved, validated ``Spec`` (syntax, expressions, resolution, schema, formatting, the load/parse entry points)."""
