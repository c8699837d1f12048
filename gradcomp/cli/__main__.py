"""`python -m gradcomp.cli`."""
import sys

from . import main

sys.exit(main())
