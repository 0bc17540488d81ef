"""Prints, for every Hugging Face class the import tests build (``tests/test_import.py``'s ``CONFIGS``), the largest
|tfspec - Hugging Face| of the logits (base models: last hidden states) in float32, on a plain and a right-padded
batch, every weight perturbed away from its initialisation: the figures the tests bound by 1e-5.

    python benchmarks/import_diffs.py
"""

import pathlib
import sys
import tempfile
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

import tfspec  # noqa: E402
from test_import import CONFIGS, outputs, saved  # noqa: E402


def main() -> None:
    warnings.simplefilter("ignore")
    print("| class | plain batch | padded batch |\n|---|---|---|")
    for cls in CONFIGS:
        directory, reference = saved(pathlib.Path(tempfile.mkdtemp()), cls)
        model = tfspec.from_pretrained(directory)
        diffs = []
        for padded in (False, True):
            ours, theirs, real = outputs(model, reference, cls, padded=padded, pooler_tolerance=None)
            diffs.append((ours - theirs)[real].abs().max().item())
        print(f"| {cls} | {diffs[0]:.1e} | {diffs[1]:.1e} |")


if __name__ == "__main__":
    main()
