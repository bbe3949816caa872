"""`python -m aether_context.cli ...`"""

import sys

from . import main

sys.exit(main())
