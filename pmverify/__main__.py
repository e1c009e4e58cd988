"""``python -m pmverify`` is ``pmverify``."""

import sys

from .cli import main

sys.exit(main())
