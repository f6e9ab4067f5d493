"""``python -m vmpooler.web.cli``: the ``vmpooler`` command."""

import sys

from vmpooler.web.cli.command import main

sys.exit(main())
