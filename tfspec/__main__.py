"""``python -m tfspec`` (and ``torchrun -m tfspec train ...``): the command line."""

import sys

from .cli import main

sys.exit(main())
