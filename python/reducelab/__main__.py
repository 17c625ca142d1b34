"""`python -m reducelab`: the same as the `reducelab` command."""

import sys

from .cli import main

sys.exit(main())
