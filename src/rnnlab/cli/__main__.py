"""``python -m rnnlab.cli``: the ``rnnlab`` command."""

import sys

from .run import main

sys.exit(main())
