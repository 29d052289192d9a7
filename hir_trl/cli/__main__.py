"""``python -m hir_trl.cli``: the ``hir-trl`` command."""

import sys

from .main import main

sys.exit(main())
